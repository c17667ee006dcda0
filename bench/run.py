#!/usr/bin/env python3
"""The experiment runner: one declarative list of experiments, each run through the vtensor
command (sweep, maxbatch, replay traces through sweep --trace), written as CSV and JSON under an
output folder and rendered as a Markdown table. Debian's python3 only.

  bench/run.py list                       # the experiments and what each runs
  bench/run.py NAME [NAME ...] | all      # run them; results in bench-out/NAME.{csv,json,md}
                                          # (all: every experiment but the runner's own test, smoke)
  bench/run.py NAME --update-docs         # and rewrite NAME's generated tables in docs/*.md
  options: --out DIR (bench-out), --jobs N (parallel maxbatch searches, default 2)

A generated table in docs/ sits between `<!-- generated: bench/run.py NAME -->` and
`<!-- end generated: NAME -->`; --update-docs replaces what lies between, and the table carries
the command that produced it. Policies: `all` means every policy `vtensor policies` lists, so
a new policy joins the tables on the next run.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("VTENSOR_BINARY") or os.path.join(ROOT, "build", "vtensor")

# The reference batches of docs/experiments.md (FP32, SGD with momentum; CNNs at 224x224).
PAPER_MODELS = [
    {"model": "resnet50", "batch": 32},
    {"model": "vgg16", "batch": 64},
    {"model": "gpt2-small", "batch": 8, "seq": 1024},
    {"model": "bert-base", "batch": 32, "seq": 128},
]
TINY_MODELS = [{"model": m} for m in ("resnet-tiny", "vgg-tiny", "gpt-tiny", "bert-tiny")]
PAPER_MODELS_ADAM = [  # the checkpoint section's setting: transformers with Adam (m and v counted)
    {"model": "bert-base", "seq": 128, "optimizer": "adam"},
    {"model": "gpt2-small", "seq": 1024, "optimizer": "adam"},
    {"model": "resnet50"},
    {"model": "vgg16"},
]
DTR_LOGS = ["densenet121", "inceptionv4", "lstm", "resnet32", "transformer", "treelstm", "unet", "unroll_gan"]

# kind grid: `vtensor sweep` per model over policies x budgets (overhead against none at the
# reference batch), then, with maxbatch, `vtensor maxbatch --budget` per budget and policy.
# kind logs: `vtensor sweep --trace dtr:LOG` per log and GPU.
# kind maxbatch: `vtensor maxbatch` at the whole GPU's memory per model, GPU and policy; each cell
# the batch and the predicted time per sample at it.
EXPERIMENTS = {
    "headline-p100": {"kind": "grid", "backend": "sim", "gpu": "p100-16g", "models": PAPER_MODELS,
                      "policies": "all", "budgets": ["50%", "25%"], "iters": 4, "maxbatch": True,
                      "about": "every policy x 4 paper models x {50%, 25%} of the unmanaged peak, p100-16g: "
                               "overhead against none at the reference batch / maximum batch in the budget"},
    "headline-h100": {"kind": "grid", "backend": "sim", "gpu": "h100-80g", "models": PAPER_MODELS,
                      "policies": "all", "budgets": ["50%", "25%"], "iters": 4, "maxbatch": True,
                      "about": "the same on h100-80g"},
    "dtr-logs": {"kind": "logs", "gpus": ["p100-16g", "h100-80g"], "logs": DTR_LOGS,
                 "policies": ["capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "checkpoint", "auto"],
                 "budgets": ["50%", "25%"], "extra_budgets": {"transformer": ["4GB"]}, "iters": 4,
                 "about": "the DTR artifact's operator logs replayed at 50% / 25% of each log's unmanaged peak"},
    "maxbatch-gpu": {"kind": "maxbatch", "gpus": ["p100-16g", "h100-80g"],
                     "models": [{"model": m["model"], **({"seq": m["seq"]} if "seq" in m else {})} for m in PAPER_MODELS],
                     "policies": ["none", "capuchin-swap", "capuchin-recompute", "capuchin", "dtr", "vdnn-conv",
                                  "lru-recompute", "auto"],
                     "ratios": [["capuchin", "none"], ["auto", "none"]],
                     "about": "maximum batch at the whole GPU's memory, SGD with momentum (Capuchin's 7x setting)"},
    "maxbatch-adam": {"kind": "maxbatch", "gpus": ["p100-16g", "h100-80g"], "models": PAPER_MODELS_ADAM,
                      "policies": ["none", "checkpoint", "capuchin", "capuchin-recompute", "dtr", "lru-recompute"],
                      "ratios": [["capuchin", "checkpoint"], ["capuchin", "none"]],
                      "about": "maximum batch at the whole GPU's memory, transformers with Adam "
                               "(Capuchin's anchor against gradient checkpointing)"},
    "maxbatch-vdnn": {"kind": "maxbatch", "gpus": ["titan-x-12g"],
                      "models": [{"model": "vgg16"}, {"model": "vgg16", "flags": ["--inplace-relu-grad"]},
                                 {"model": "resnet50"}, {"model": "resnet50", "flags": ["--inplace-relu-grad"]}],
                      "policies": ["none", "vdnn-conv", "vdnn-all", "vdnn-dyn"], "ratios": [],
                      "about": "maximum batch in a Titan X's 12 GiB under vDNN, with and without the in-place ReLU backward"},
    "smoke": {"kind": "grid", "backend": "sim", "gpu": "p100-16g", "models": [{"model": "mlp-tiny", "batch": 16}],
              "policies": ["lru", "capuchin"], "budgets": ["50%"], "iters": 3, "maxbatch": True,
              "about": "the runner's own test: mlp-tiny on sim, two policies, one budget", "test_only": True},
    "tiny-cpu": {"kind": "grid", "backend": "cpu", "models": TINY_MODELS, "policies": "all",
                 "budgets": ["50%", "25%"], "iters": 20, "maxbatch": False,
                 "sweep_args": ["--um-page-size", "16KiB"],  # the default 2 MiB page is larger than these models
                 "about": "the tiny presets trained for real on the cpu backend: every policy at 50% / 25%, "
                          "bit-identity to none checked per row; um pages of 16 KiB"},
}


def vt(args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"vtensor {' '.join(args)} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-500:]}")
    return p


def policies_of(exp):
    if exp["policies"] != "all":
        return exp["policies"]
    names = [line.split()[0] for line in vt(["policies"]).stdout.splitlines() if line.strip()]
    return [n for n in names if n != "none"]


def model_args(m):
    a = ["--model", m["model"]]
    if "batch" in m:
        a += ["--batch", str(m["batch"])]
    if "seq" in m:
        a += ["--seq", str(m["seq"])]
    if "optimizer" in m:
        a += ["--optimizer", m["optimizer"]]
    return a + m.get("flags", [])


def model_label(m):
    extra = [f"seq {m['seq']}"] if "seq" in m else []
    extra += [m["optimizer"]] if "optimizer" in m else []
    extra += [f.lstrip("-") for f in m.get("flags", [])]
    return m["model"] + (f" ({', '.join(extra)})" if extra else "")


def densities(m):
    """The non-zero counts a cpu run measured for this model (bench/densities/MODEL.json): what
    sizes the compress policies' tensors on sim. None for a model without ReLU / max-pool."""
    path = os.path.join(ROOT, "bench", "densities", m["model"] + ".json")
    return path if os.path.exists(path) else None


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def run_grid(name, exp, out, jobs):
    pols = policies_of(exp)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in exp["models"]:
            sweep_csv = os.path.join(tmp, "sweep.csv")
            a = ["sweep", *model_args(m), "--backend", exp["backend"], "--iters", str(exp["iters"]),
                 "--policies", ",".join(pols), "--budgets", ",".join(exp["budgets"]), "--out", sweep_csv,
                 *exp.get("sweep_args", [])]
            if exp["backend"] == "sim":
                a += ["--gpu", exp["gpu"]]
                if densities(m):
                    a += ["--densities", densities(m)]
            print(f"[{name}] {m['model']}: sweep over {len(pols)} policies x {len(exp['budgets'])} budgets", flush=True)
            vt(a)
            part = read_csv(sweep_csv)
            if exp.get("maxbatch"):
                budgets = {r["budget"]: r["budget_bytes"] for r in part}
                work = [(b, p) for b in exp["budgets"] for p in ["none", *pols]]
                print(f"[{name}] {m['model']}: {len(work)} maximum-batch searches", flush=True)

                def search(bp, m=m):
                    b, p = bp
                    rep = os.path.join(tmp, f"mb_{b.rstrip('%')}_{p}.json")
                    mb = model_args({k: v for k, v in m.items() if k != "batch"})  # the search chooses the batch
                    d = ["--densities", densities(m)] if p.startswith("compress") and densities(m) else []
                    vt(["maxbatch", *mb, "--gpu", exp["gpu"], "--policy", p, "--budget", budgets[b], "--report", rep, *d])
                    with open(rep) as f:
                        return bp, json.load(f)["max_batch"]

                with ThreadPoolExecutor(max_workers=jobs) as ex:
                    found = dict(ex.map(search, work))
                for r in part:
                    r["max_batch"] = found[(r["budget"], r["policy"])]
                    r["none_max_batch"] = found[(r["budget"], "none")]
            for r in part:
                r["gpu"] = exp.get("gpu", "")
            rows += part
    return rows


def run_logs(name, exp, out, jobs):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = [(g, log) for g in exp["gpus"] for log in exp["logs"]]

        def one(gl):
            g, log = gl
            path = os.path.join(tmp, f"{g}_{log}.csv")
            budgets = exp["budgets"] + exp.get("extra_budgets", {}).get(log, [])
            vt(["sweep", "--trace", f"dtr:{log}", "--gpu", g, "--iters", str(exp["iters"]),
                "--policies", ",".join(policies_of(exp)), "--budgets", ",".join(budgets), "--out", path])
            part = read_csv(path)
            for r in part:
                r.update(gpu=g, model=log)
            return part

        print(f"[{name}] {len(work)} replays", flush=True)
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            for part in ex.map(one, work):
                rows += part
    return rows


def run_maxbatch(name, exp, out, jobs):
    work = [(g, i, p) for g in exp["gpus"] for i in range(len(exp["models"])) for p in exp["policies"]]
    print(f"[{name}] {len(work)} maximum-batch searches", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        def search(w):
            g, i, p = w
            m = exp["models"][i]
            rep = os.path.join(tmp, f"{g}_{i}_{p}.json")
            d = ["--densities", densities(m)] if p.startswith("compress") and densities(m) else []
            vt(["maxbatch", *model_args(m), "--gpu", g, "--policy", p, "--report", rep, *d])
            with open(rep) as f:
                r = json.load(f)
            b, ms = r["max_batch"], r["iteration_ms"]
            return {"model": model_label(m), "gpu": g, "policy": p, "max_batch": b,
                    "peak_allocated_bytes": r["peak_allocated_bytes"], "iteration_ms": round(ms, 3),
                    "ms_per_sample": round(ms / b, 4) if b else "", "non_monotonic": ";".join(map(str, r["non_monotonic"]))}

        with ThreadPoolExecutor(max_workers=jobs) as ex:
            return list(ex.map(search, work))


# ---- Markdown

def ratio(r):
    return f"{float(r['overhead']):.2f}×" if r["status"] == "ok" else "OOM"


def md_grid(name, exp, rows):
    pols = []
    for r in rows:
        if r["policy"] not in pols:
            pols.append(r["policy"])
    if exp.get("maxbatch"):
        head = ["model (batch, none's time)", "budget", "none: max batch", *pols]
    else:
        head = ["model (batch)", "budget", "policy", "peak on device MiB", "time vs none", "MiB moved", "recomputed ops",
                "bit-identical"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = []
    for r in rows:
        k = (r["model"], r["batch"], r["budget"])
        if k not in keys:
            keys.append(k)
    for model, batch, budget in keys:
        sel = [r for r in rows if (r["model"], r["batch"], r["budget"]) == (model, batch, budget)]
        budget_text = f"{budget} ({int(sel[0]['budget_bytes']) / 2**30:.2f} GiB)" if exp["backend"] == "sim" else \
            f"{budget} ({int(sel[0]['budget_bytes']) / 2**20:.2f} MiB)"
        if exp.get("maxbatch"):
            cells = {r["policy"]: f"{ratio(r)} / {r['max_batch']}" for r in sel}
            none_ms = float(sel[0]["unmanaged_ms"])
            lines.append("| " + " | ".join([f"{model} ({batch}, {none_ms:.0f} ms)", budget_text, str(sel[0]["none_max_batch"]),
                                            *[cells.get(p, "") for p in pols]]) + " |")
        else:
            for r in sel:
                ok = r["status"] == "ok"
                moved = (int(r["swapped_out_bytes"] or 0) + int(r["swapped_in_bytes"] or 0)) / 2**20
                lines.append("| " + " | ".join([
                    f"{model} ({batch})", budget_text, r["policy"],
                    f"{int(r['peak_device_bytes']) / 2**20:.2f}" if ok else "OOM", ratio(r),
                    f"{moved:.1f}" if ok else "", r["recomputed_ops"] if ok else "",
                    r.get("bit_identical", "") if ok else ""]) + " |")
    return "\n".join(lines)


def md_logs(name, exp, rows):
    pols = exp["policies"]
    head = ["log", "budget", *[f"{p} ({g})" for g in exp["gpus"] for p in pols]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for log in exp["logs"]:
        for b in exp["budgets"] + exp.get("extra_budgets", {}).get(log, []):
            cells = []
            for g in exp["gpus"]:
                for p in pols:
                    r = next((x for x in rows if (x["model"], x["gpu"], x["budget"], x["policy"]) == (log, g, b, p)), None)
                    cells.append(ratio(r) if r else "")
            lines.append("| " + " | ".join([log, b, *cells]) + " |")
    return "\n".join(lines)


def md_maxbatch(name, exp, rows):
    pols = exp["policies"]
    head = ["model", "GPU", *pols, *[f"{a} / {b}" for a, b in exp["ratios"]]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in exp["gpus"]:
        for m in exp["models"]:
            label = model_label(m)
            got = {r["policy"]: r for r in rows if (r["model"], r["gpu"]) == (label, g)}
            cells = [f"{got[p]['max_batch']} ({got[p]['ms_per_sample']:.2f} ms)" if got[p]["max_batch"] else "0"
                     for p in pols]
            for a, b in exp["ratios"]:
                x, y = got[a]["max_batch"], got[b]["max_batch"]
                cells.append(f"{x / y:.2f}×" if y else "–")
            lines.append("| " + " | ".join([label, g, *cells]) + " |")
    return "\n".join(lines)


RUNNERS = {"grid": run_grid, "logs": run_logs, "maxbatch": run_maxbatch}
RENDER = {"grid": md_grid, "logs": md_logs, "maxbatch": md_maxbatch}


def render(name, exp, rows):
    table = RENDER[exp["kind"]](name, exp, rows)
    return f"Generated by `bench/run.py {name}` ({exp['about']}).\n\n{table}\n"


def update_docs(name, text, docs):
    begin = f"<!-- generated: bench/run.py {name} -->"
    end = f"<!-- end generated: {name} -->"
    hits = 0
    for fn in sorted(os.listdir(docs)):
        path = os.path.join(docs, fn)
        if not fn.endswith(".md"):
            continue
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
        sys.exit(f"[{name}] no {docs}/*.md holds the markers {begin} ... {end}")


def write_outputs(name, exp, rows, out):
    os.makedirs(out, exist_ok=True)
    fields = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    for ext, write in ((".csv", lambda f: (lambda w: (w.writeheader(), w.writerows(rows)))(csv.DictWriter(f, fieldnames=fields))),
                       (".json", lambda f: json.dump({"experiment": name, "spec": exp, "rows": rows}, f, indent=1))):
        path = os.path.join(out, name + ext)
        with open(path + ".tmp", "w", newline="") as f:
            write(f)
        os.replace(path + ".tmp", path)
    text = render(name, exp, rows)
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+", help="experiment names, 'all', or 'list'")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-out"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--update-docs", action="store_true")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs"), help="folder of the Markdown files to update")
    a = ap.parse_args()
    if a.names == ["list"]:
        for n, e in EXPERIMENTS.items():
            print(f"{n:15s} {e['about']}")
        return
    names = [n for n, e in EXPERIMENTS.items() if not e.get("test_only")] if a.names == ["all"] else a.names
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        sys.exit(f"unknown experiment {', '.join(unknown)}; accepted: {', '.join(EXPERIMENTS)}, all, list")
    if a.jobs < 1:
        sys.exit("--jobs must be at least 1")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} not found: build first (scripts/install.sh)")
    for n in names:
        exp = EXPERIMENTS[n]
        rows = RUNNERS[exp["kind"]](n, exp, a.out, a.jobs)
        text = write_outputs(n, exp, rows, a.out)
        print(f"[{n}] wrote {os.path.join(a.out, n)}.csv, .json, .md ({len(rows)} rows)")
        if a.update_docs:
            update_docs(n, text, a.docs)


if __name__ == "__main__":
    main()
