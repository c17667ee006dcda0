#include "vtensor/core/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"

namespace fs = std::filesystem;

namespace vtensor {
namespace {

// Temporary files of writes in flight, for the signal handler: fixed slots of plain chars (a
// handler may only unlink and _exit).
constexpr size_t kSlots = 16, kPathMax = 4096;
std::array<std::array<char, kPathMax>, kSlots> g_temps{};
std::array<std::atomic<bool>, kSlots> g_used{};
std::mutex g_mu;

int claim(const std::string& path) {
  std::lock_guard<std::mutex> g(g_mu);
  if (path.size() >= kPathMax) return -1;
  for (size_t i = 0; i < kSlots; ++i)
    if (!g_used[i].load()) {
      std::memcpy(g_temps[i].data(), path.c_str(), path.size() + 1);
      g_used[i].store(true);
      return static_cast<int>(i);
    }
  return -1;
}

void release(int slot) {
  if (slot >= 0) g_used[static_cast<size_t>(slot)].store(false);
}

extern "C" void on_signal(int sig) {
  for (size_t i = 0; i < kSlots; ++i)
    if (g_used[i].load()) ::unlink(g_temps[i].data());
  ::_exit(128 + sig);
}

// Where a write to `path` lands: a symlink's (final) target, else the path itself.
fs::path target_of(const fs::path& p) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(p, ec))) return fs::weakly_canonical(p, ec);
  return p;
}

// A temporary file beside the target: removed unless renamed onto it (whatever is thrown), and
// registered for the signal handler meanwhile.
struct TempFile {
  std::string path;
  int fd = -1, slot = -1;
  bool created = false, committed = false;
  explicit TempFile(std::string tmpl) : path(std::move(tmpl)) {
    fd = ::mkstemp(path.data());
    created = fd >= 0;
    if (created) slot = claim(path);
  }
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (created && !committed) ::unlink(path.c_str());
    release(slot);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

// The live transaction's staged files (temporary file, target, what), or null.
struct Staged {
  std::unique_ptr<TempFile> tmp;
  fs::path target;
  std::string path, what;
};
std::vector<Staged>* g_staged = nullptr;

bool written_in_place(const fs::file_status& s) { return fs::is_character_file(s) || fs::is_fifo(s); }

fs::path identity(const std::string& path) {
  std::error_code ec;
  const fs::path t = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path) : t;
}

void fail_io(const std::string& what, const std::string& path, const std::string& why) {
  throw IoError("error writing " + what + " '" + path + "': " + why);
}

}  // namespace

std::string check_output(const std::string& path, const std::string& flag) {
  const fs::path t = target_of(path);
  std::error_code ec;
  const fs::file_status s = fs::status(t, ec);
  if (fs::is_directory(s)) throw std::invalid_argument(flag + " '" + path + "' is a folder; accepted: a file path");
  if (fs::exists(s) && !fs::is_regular_file(s) && !written_in_place(s))
    throw std::invalid_argument(flag + " '" + path + "' is neither a regular file, a character device nor a FIFO");
  if (written_in_place(s)) {
    if (::access(t.c_str(), W_OK) != 0) throw std::invalid_argument(flag + " '" + path + "': not writable");
    return t.string();
  }
  fs::path dir = t.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(flag + " '" + path + "': directory '" + dir.string() + "' does not exist");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument(flag + " '" + path + "': directory '" + dir.string() + "' is not writable");
  if (fs::exists(s) && ::access(t.c_str(), W_OK) != 0) throw std::invalid_argument(flag + " '" + path + "': not writable");
  return t.string();
}

void check_distinct(const std::vector<std::pair<std::string, std::string>>& outputs, const std::vector<std::string>& inputs) {
  std::vector<std::pair<fs::path, std::string>> seen;
  for (const auto& in : inputs)
    if (!in.empty()) seen.emplace_back(identity(in), "the input '" + in + "'");
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    check_output(path, flag);
    const fs::path id = identity(target_of(path).string());
    for (const auto& [other, name] : seen)
      if (other == id && id != "/dev/null")
        throw std::invalid_argument(flag + " '" + path + "' is the same file as " + name + "; each output needs its own file");
    seen.emplace_back(id, flag + " '" + path + "'");
  }
}

void write_output(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& fill,
                  bool now) {
  const fs::path t = target_of(path);
  std::error_code ec;
  const fs::file_status s = fs::status(t, ec);
  if (fs::is_directory(s)) throw std::invalid_argument(what + " '" + path + "' is a folder; accepted: a file path");
  if (written_in_place(s)) {  // /dev/null, a pipe: written as it is, never replaced
    std::ofstream out(t, std::ios::out | std::ios::binary);
    if (!out) throw std::invalid_argument("cannot write " + what + " '" + path + "'");
    fill(out);
    out.flush();
    if (fault::hit(fault::Kind::kReportWrite)) throw IoError(fault::message(fault::Kind::kReportWrite, what + " write"));
    if (!out) fail_io(what, path, std::strerror(errno ? errno : EIO));
    return;
  }
  fs::path dir = t.parent_path();
  if (dir.empty()) dir = ".";
  auto tmp_ptr = std::make_unique<TempFile>((dir / ("." + t.filename().string() + ".XXXXXX")).string());
  TempFile& tmp = *tmp_ptr;
  if (tmp.fd < 0)
    throw std::invalid_argument("cannot write " + what + " '" + path + "' (is the directory there and writable?): " +
                                std::strerror(errno));
  // The mode a new file gets (mkstemp makes 0600), or the one the file it replaces had.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat old {};
  const mode_t mode = ::stat(t.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~mask);
  if (::fchmod(tmp.fd, mode) != 0) fail_io(what, path, std::strerror(errno));
  {
    std::ofstream out(tmp.path, std::ios::out | std::ios::binary | std::ios::trunc);
    if (!out) fail_io(what, path, "cannot open its temporary file");
    fill(out);  // a throw here leaves the target as it was: ~TempFile removes the temporary file
    out.flush();
    const bool ok = static_cast<bool>(out);
    out.close();
    if (!ok || out.fail()) fail_io(what, path, errno ? std::strerror(errno) : "the stream failed");
  }
  if (fault::hit(fault::Kind::kReportWrite)) throw IoError(fault::message(fault::Kind::kReportWrite, what + " write"));
  if (::fsync(tmp.fd) != 0) fail_io(what, path, std::strerror(errno));
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail_io(what, path, std::strerror(errno));
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (g_staged && !now) {  // renamed at the transaction's commit, with the run's other outputs
      g_staged->push_back({std::move(tmp_ptr), t, path, what});
      return;
    }
  }
  if (::rename(tmp.path.c_str(), t.c_str()) != 0)
    throw IoError("cannot move " + what + " into '" + path + "': " + std::strerror(errno));
  tmp.committed = true;
}

OutputTransaction::OutputTransaction() {
  std::lock_guard<std::mutex> g(g_mu);
  if (g_staged) throw std::logic_error("OutputTransaction: one is already open");
  g_staged = new std::vector<Staged>();
}

OutputTransaction::~OutputTransaction() {
  std::vector<Staged>* staged = nullptr;
  {
    std::lock_guard<std::mutex> g(g_mu);
    std::swap(staged, g_staged);
  }
  delete staged;  // each TempFile not committed removes its file
}

void OutputTransaction::commit() {
  std::vector<Staged>* staged = nullptr;
  {
    std::lock_guard<std::mutex> g(g_mu);
    std::swap(staged, g_staged);
  }
  if (!staged) return;
  std::unique_ptr<std::vector<Staged>> owned(staged);
  for (Staged& s : *staged) {
    if (::rename(s.tmp->path.c_str(), s.target.c_str()) != 0)
      throw IoError("cannot move " + s.what + " into '" + s.path + "': " + std::strerror(errno));
    s.tmp->committed = true;
  }
}

void write_output(const std::string& path, const std::string& what, const std::string& text) {
  write_output(path, what, [&](std::ostream& out) { out << text; });
}

void install_output_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace vtensor
