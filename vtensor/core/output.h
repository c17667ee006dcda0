// Every file vtensor writes (reports, pages, traces, sweeps, densities, cost tables) goes through
// here, so that no run clobbers what it should not or leaves a file half-written:
//  - check_output() before a run: the folder exists and is writable, the path is not a folder,
//    and a symlink is followed to its target; check_distinct() refuses two outputs, or an output
//    and an input, that are one file.
//  - write_output(): a unique temporary file beside the target (mkstemp, never PATH.tmp, so two
//    runs writing one path, or a user's own PATH.tmp, are safe), written, flushed, fsync'ed and
//    closed with every error checked, then renamed onto the target (a symlink's target: the link
//    stays). An existing character device or FIFO (/dev/null, a pipe) is written in place, never
//    replaced. On any failure the target is as it was and the temporary file is gone.
//  - OutputTransaction: a run's outputs renamed together at its end, or none of them.
//  - install_output_signal_handlers(): SIGINT / SIGTERM remove the temporary files of writes in
//    flight (and of staged outputs), then exit 130 / 143.
// Bad paths throw std::invalid_argument naming the flag; failed writes throw IoError.
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace vtensor {

// Checks that `path` can be written; returns the file a write will land on (symlinks resolved).
std::string check_output(const std::string& path, const std::string& flag);
// (flag, path) outputs (empty paths skipped) and input paths: each output checked, and no two
// naming one file (after symlinks), nor an output naming an input.
void check_distinct(const std::vector<std::pair<std::string, std::string>>& outputs,
                    const std::vector<std::string>& inputs = {});
// Writes what `fill` puts on the stream to `path` (see above); `what` names it in messages.
// now: renamed at once even while an OutputTransaction is open (a run's periodic saved state).
void write_output(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& fill,
                  bool now = false);
void write_output(const std::string& path, const std::string& what, const std::string& text);
void install_output_signal_handlers();

// A run's outputs committed together: while one is alive, write_output() writes each file whole to
// its temporary file and defers the rename to commit(), so a run that fails (or is interrupted)
// after writing some outputs leaves every existing output as it was; without commit() the
// destructor removes the temporary files. Devices are still written at once. One at a time.
class OutputTransaction {
 public:
  OutputTransaction();
  ~OutputTransaction();
  void commit();  // renames every staged file onto its target; throws IoError naming one that fails
  OutputTransaction(const OutputTransaction&) = delete;
  OutputTransaction& operator=(const OutputTransaction&) = delete;
};

}  // namespace vtensor
