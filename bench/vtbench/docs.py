"""--update-docs: a generated table in docs/**/*.md sits between `<!-- generated: bench/run.py
NAME -->` and `<!-- end generated: NAME -->`; update_docs() replaces what lies between with the
table's new text in every file that holds the markers, and fails if none does."""
import glob
import os
import re
import sys


def update_docs(name, text, docs):
    begin = f"<!-- generated: bench/run.py {name} -->"
    end = f"<!-- end generated: {name} -->"
    hits = 0
    paths = sorted(glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))  # docs/experiments/*.md too
    for path in paths:
        with open(path) as f:
            doc = f.read()
        pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pat.search(doc):
            continue
        doc = pat.sub(lambda _: f"{begin}\n{text}{end}", doc)
        with open(path + ".tmp", "w") as f:
            f.write(doc)
        os.replace(path + ".tmp", path)
        hits += 1
        print(f"[{name}] updated {path}")
    if not hits:
        sys.exit(f"[{name}] no {docs}/**/*.md holds the markers {begin} ... {end}")
