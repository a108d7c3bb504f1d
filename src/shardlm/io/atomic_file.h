// io/atomic_file.h: write a file so that a crash or kill never leaves it half-written.
// Writes go to "<path>.tmp.<pid>"; commit() flushes, fsyncs, renames over <path> and fsyncs the
// directory. A destroyed, uncommitted AtomicFile removes its temp file.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace shardlm::io {

class AtomicFile {
public:
    explicit AtomicFile(std::string path);
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile();

    void write(const void* data, size_t bytes);
    void commit();
    const std::string& path() const { return path_; }

private:
    std::string path_, tmp_;
    std::FILE* f_ = nullptr;
};

// fsync a directory (after a rename inside it). Errors are ignored where the FS does not support it.
void fsync_dir(const std::string& dir);
// Write a whole string atomically.
void write_file_atomic(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);

}  // namespace shardlm::io
