// comm/settings.h: the process-wide settings of the communication layer: how a thread waits, how
// long before a wait fails, whose algorithms the collectives run, and the ring's segment size.
#pragma once
#include <cstddef>

#include "shardlm/core/enum_names.h"

namespace shardlm::comm {

// How a thread waits for messages: the communication thread while the caller computes, and the
// caller's thread inside a blocking operation or Request::wait().
//   Sleep (default): poll MPI_Testall 32 times (yielding between polls), then sleep with back-off
//                    between polls (5 -> 100 us; up to 1 ms once the wait has lasted 20 ms), so a
//                    rank waiting for a slow or stopped peer leaves the core to it (no busy-waiting:
//                    with more ranks than cores the spinning waiter took the core its peer needed).
//   Yield: poll with sched_yield() between polls.   Spin: poll continuously (steals a core).
// SHARDLM_COMM_WAIT=sleep|yield|spin in the environment sets it at start-up (for benchmarks).
enum class WaitMode { Sleep, Yield, Spin };
void set_background_wait(WaitMode m);
WaitMode background_wait();
// Seconds a wait inside an operation may go without the messages it waits for arriving before the
// operation fails with an error naming it, its group and this rank (0 = wait forever, the default).
// After one timeout every later wait fails at once: the job is going down (comm/progress.h).
void set_timeout(double seconds);
double timeout();
// A wait of this process has timed out (then its flight record is worth reading; otherwise an error
// is not a hang).
bool timed_out();
// Whose algorithms the collectives run (--collectives): Ring, ours (deterministic sums, exact byte
// accounting, progress on the communication thread; the default), or Mpi, the MPI library's own
// MPI_Iallreduce / MPI_Ireduce_scatter_block / MPI_Iallgather / MPI_Ibcast (a cluster's tuned MPI:
// UCX/UCC, HCOLL, in-network reduction; sums equal on every rank, to rounding of the ring's; bytes
// counted as the ring's formulas: comm/mpi_collectives.h). Set it on every rank alike, with no
// operation pending; an operation takes the backend current when it is issued.
enum class CollectivesBackend { Ring, Mpi };
inline constexpr EnumName<CollectivesBackend> kCollectivesNames[] = {{CollectivesBackend::Ring, "ring"},
                                                                    {CollectivesBackend::Mpi, "mpi"}};
constexpr const auto& enum_names(CollectivesBackend) { return kCollectivesNames; }
void set_collectives(CollectivesBackend b);
CollectivesBackend collectives();

// Segment size of the pipelined ring steps (bytes, rounded to whole elements); default 256 KiB.
// Set it on every rank alike, with no operation pending (both ends must cut messages the same way).
void set_segment_bytes(size_t bytes);
size_t segment_bytes();

}  // namespace shardlm::comm
