// comm/mpi_env.h: MPI start-up and shut-down (the error macro for MPI calls: comm/mpi_call.h).
//
// MpiEnv initialises MPI only when this process was started by Open MPI's mpirun (it sees
// OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment). A plain `shardlm ...` never calls MPI_Init,
// starts no daemon and runs as world size 1 with a "self" world Group (every collective is then the
// identity). One MpiEnv per process; create it first thing in main() (after ensure_blas_coretype,
// which may re-exec) and let it outlive every Group, Grid and Request.
//
// Thread level: MPI_THREAD_SERIALIZED. Non-blocking collectives run on one background
// communication thread per process (comm/progress.h) while blocking ones run on the caller's thread;
// every MPI call holds the MPI mutex (comm/progress.h) (Progress::mpi()), so two threads never call MPI at the
// same time, which is exactly what SERIALIZED allows (FUNNELED would forbid the communication thread
// from calling MPI at all).
//
// Waiting: no thread blocks inside MPI (Open MPI's blocking calls spin). Both threads poll
// MPI_Testall with the mutex released between polls, sleeping with back-off between polls
// (comm::set_background_wait), so a waiting rank does not take a core from the peer it waits for.
//
// Errors: MPI_ERRORS_RETURN is set on MPI_COMM_WORLD and on every communicator shardlm creates, and
// every MPI call goes through SHARDLM_MPI_CHECK, so an MPI failure becomes a shardlm::Error naming
// the call, the file and the line instead of an abort.
#pragma once
#include <mpi.h>

#include <memory>

#include "shardlm/comm/mpi_call.h"
#include "shardlm/core/check.h"

namespace shardlm::comm {

class Group;

class MpiEnv {
public:
    // argc/argv may be null (MPI does not need them).
    explicit MpiEnv(int* argc = nullptr, char*** argv = nullptr);
    MpiEnv(const MpiEnv&) = delete;
    MpiEnv& operator=(const MpiEnv&) = delete;
    // Waits for queued communication, stops the communication thread, frees the world Group and
    // calls MPI_Finalize (if MPI was initialised).
    ~MpiEnv();

    // True when the environment shows that Open MPI's mpirun/mpiexec started this process.
    static bool launched_by_mpirun();

    // True iff MPI was initialised (launched by mpirun, even with -np 1).
    bool is_distributed() const { return distributed_; }
    int world_rank() const { return rank_; }
    int world_size() const { return size_; }
    // MPI_COMM_WORLD as a Group (a self Group of size 1 without mpirun).
    Group& world() { return *world_; }
    const Group& world() const { return *world_; }

    // For fatal errors in a distributed run: MPI_Abort(MPI_COMM_WORLD, code) so that the other
    // ranks do not hang in a collective waiting for this one (plain exit(code) without MPI).
    [[noreturn]] void abort(int code) const;

private:
    bool distributed_ = false;
    int rank_ = 0, size_ = 1;
    std::unique_ptr<Group> world_;
};

}  // namespace shardlm::comm
