#include "shardlm/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shardlm/core/check.h"
#include "shardlm/core/format.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

std::string lock_path(const std::string& dir, RunLockKind k) {
    return (fs::path(dir) / (k == RunLockKind::Job ? ".shardlm-job.lock" : ".shardlm-ranks.lock")).string();
}

std::string hostname() {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    return host;
}

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot ("" if it is gone).
std::string start_time(long pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return "";
    const size_t paren = stat.rfind(')');  // the command name may hold spaces
    if (paren == std::string::npos) return "";
    std::istringstream rest(stat.substr(paren + 2));
    std::string field;
    for (int i = 3; i <= 22 && rest >> field; i++) {
    }
    return field;
}

// "shardlm train" / "shardlm launch": this process's program name and its first argument.
std::string command() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string arg0, arg1;
    std::getline(in, arg0, '\0');
    std::getline(in, arg1, '\0');
    return fs::path(arg0).filename().string() + (arg1.empty() ? "" : " " + arg1);
}

std::string describe_holder(const std::string& contents) {
    std::istringstream in(contents);
    long pid = 0;
    std::string host, cmd;
    long long since = 0;
    if (!(in >> pid >> host >> since)) return "a process that has not written its name yet";
    std::getline(in, cmd);
    if (!cmd.empty() && cmd[0] == ' ') cmd.erase(0, 1);
    char when[32] = "?";
    const std::time_t t = std::time_t(since);
    struct tm tm_buf;
    if (localtime_r(&t, &tm_buf)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm_buf);
    return format("PID %ld on %s (%s, since %s)", pid, host.c_str(), cmd.empty() ? "shardlm" : cmd.c_str(), when);
}

std::string read_all(int fd) {
    std::string out;
    char buf[512];
    ssize_t n;
    off_t at = 0;
    while ((n = ::pread(fd, buf, sizeof(buf), at)) > 0) out.append(buf, size_t(n)), at += n;
    return out;
}

}  // namespace

std::unique_ptr<RunLock> RunLock::try_take(const std::string& dir, RunLockKind k, std::string* holder) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string path = lock_path(dir, k);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SHARDLM_CHECK(fd >= 0, "cannot open the run directory's lock '", path, "': ", std::strerror(errno),
                  "\n---> HINT: --out must name a directory this user can write");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        *holder = err == EWOULDBLOCK ? describe_holder(read_all(fd)) : std::string("(flock failed: ") + std::strerror(err) + ")";
        ::close(fd);
        return nullptr;
    }
    const std::string left = read_all(fd);
    *holder = left.empty() || std::atol(left.c_str()) == long(::getpid()) ? "" : describe_holder(left);
    const std::string me = format("%ld %s %lld %s\n", long(::getpid()), hostname().c_str(), (long long)std::time(nullptr),
                                  command().c_str());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
        // the lock holds without the name: a second job is still refused, only less clearly
    }
    return std::unique_ptr<RunLock>(new RunLock(fd));
}

RunLock::~RunLock() { ::close(fd_); }  // (closing drops the lock; the file stays: removing it would race)

std::string run_lock_holder(const std::string& dir, RunLockKind k) {
    const int fd = ::open(lock_path(dir, k).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    std::string out;
    if (::flock(fd, LOCK_SH | LOCK_NB) != 0) out = describe_holder(read_all(fd));
    ::close(fd);  // (and any shared lock taken just now)
    return out;
}

long run_lock_pid(const std::string& dir, RunLockKind k) {
    std::ifstream in(lock_path(dir, k));
    long pid = 0;
    return in >> pid ? pid : 0;
}

std::string supervisor_env_value() {
    return format("%ld %s %s", long(::getpid()), start_time(::getpid()).c_str(), hostname().c_str());
}

long supervisor_pid() {
    const char* v = std::getenv(kSupervisorEnv);
    return v ? std::atol(v) : 0;
}

bool supervisor_gone() {
    const char* v = std::getenv(kSupervisorEnv);
    if (!v) return false;
    std::istringstream in(v);
    long pid = 0;
    std::string started, host;
    if (!(in >> pid >> started >> host) || pid <= 0 || host != hostname()) return false;
    return start_time(pid) != started;
}

}  // namespace shardlm::train
