// core/aligned_buffer.h: an owning, 64-byte aligned, zero-initialised array of trivially copyable T.
// Every long-lived buffer of a step (parameters, gradients, optimiser state, activations) is one of
// these, sized once at start-up and reused: nothing is allocated in the step loop.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace shardlm {

inline constexpr size_t kAlign = 64;

template <typename T>
class AlignedBuffer {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    AlignedBuffer() = default;
    explicit AlignedBuffer(size_t n) { resize(n); }
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
        if (this != &o) {
            std::free(data_);
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    ~AlignedBuffer() { std::free(data_); }

    // Reallocates (contents are lost) and zero-fills.
    void resize(size_t n) {
        std::free(data_);
        data_ = nullptr;
        size_ = n;
        if (n == 0) return;
        size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
        data_ = static_cast<T*>(std::aligned_alloc(kAlign, bytes));
        if (!data_) throw std::bad_alloc();
        std::memset(static_cast<void*>(data_), 0, bytes);
    }
    void zero() {
        if (size_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
    }

    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return size_; }
    T* begin() { return data_; }
    T* end() { return data_ + size_; }
    const T* begin() const { return data_; }
    const T* end() const { return data_ + size_; }
    size_t bytes() const { return size_ * sizeof(T); }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }
    std::span<T> span() { return {data_, size_}; }
    std::span<const T> span() const { return {data_, size_}; }

private:
    T* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace shardlm

namespace shardlm {

// A buffer of n elements of a run-time storage type (fp32, bf16 or fp16): activations that a mixed-
// precision run keeps in 16 bits. data() is the raw storage, f32() the fp32 view.
class TypedBuffer {
public:
    void resize(size_t n, size_t elem_bytes) {
        elem_ = elem_bytes;
        n_ = n;
        raw_.resize(n * elem_bytes);
    }
    void* data() { return raw_.data(); }
    const void* data() const { return raw_.data(); }
    float* f32() { return reinterpret_cast<float*>(raw_.data()); }
    const float* f32() const { return reinterpret_cast<const float*>(raw_.data()); }
    size_t size() const { return n_; }
    size_t bytes() const { return raw_.bytes(); }
    size_t elem_bytes() const { return elem_; }

private:
    AlignedBuffer<unsigned char> raw_;
    size_t n_ = 0, elem_ = 4;
};

}  // namespace shardlm
