// core/scratch.h: grow-only scratch memory per thread, for kernels' temporary rows and tiles.
// Nothing is freed in the step loop: a fresh large allocation every call would be a fresh mmap, and
// the kernel zeroing its pages would cost more than the work (measured: 10 % of a bf16 step).
#pragma once
#include <cstddef>

namespace shardlm {

// At least n floats for this thread's slot (0-7); valid until the next call with a larger n.
float* thread_scratch(int slot, size_t n);

}  // namespace shardlm
