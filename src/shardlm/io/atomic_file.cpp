#include "shardlm/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shardlm/core/check.h"

namespace shardlm::io {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
    tmp_ = cat(path_, ".tmp.", ::getpid());
    f_ = std::fopen(tmp_.c_str(), "wb");
    SHARDLM_CHECK(f_, "cannot write '", tmp_, "': ", std::strerror(errno),
                  "\n---> HINT: check that the directory exists and is writable");
}

AtomicFile::~AtomicFile() {
    if (f_) {
        std::fclose(f_);
        std::remove(tmp_.c_str());
    }
}

void AtomicFile::write(const void* data, size_t bytes) {
    SHARDLM_CHECK(f_, "write to '", path_, "' after commit");
    if (bytes && std::fwrite(data, 1, bytes, f_) != bytes)
        fail("writing '", tmp_, "' failed: ", std::strerror(errno), " (disk full?)");
}

void AtomicFile::commit() {
    SHARDLM_CHECK(f_, "commit of '", path_, "' twice");
    bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
    int err = errno;
    std::fclose(f_);
    f_ = nullptr;
    if (!ok) {
        std::remove(tmp_.c_str());
        fail("writing '", tmp_, "' failed: ", std::strerror(err), " (disk full?)");
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
        err = errno;
        std::remove(tmp_.c_str());
        fail("cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(err));
    }
    auto dir = std::filesystem::path(path_).parent_path();
    fsync_dir(dir.empty() ? "." : dir.string());
}

void fsync_dir(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& content) {
    AtomicFile f(path);
    f.write(content.data(), content.size());
    f.commit();
}

std::string read_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    SHARDLM_CHECK(f, "cannot read '", path, "': ", std::strerror(errno));
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
}

}  // namespace shardlm::io
