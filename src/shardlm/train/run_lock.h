// train/run_lock.h: one job per run directory, and the supervisor a job's ranks answer to.
//
// Two advisory locks (flock(2)) on files in the run directory:
//   .shardlm-job.lock    the job: `launch` holds it for its whole life (every attempt and restart), a
//                        plain `train` on its world rank 0;
//   .shardlm-ranks.lock  the training processes: world rank 0 of `train` holds it while it runs, so a
//                        `launch` started after another was killed can see that the earlier job's
//                        ranks are still finishing (they stop after a checkpoint: stop_signal.h).
// Each file holds its holder's "pid host command start-time". A second job is refused naming the
// holder's PID and host; the kernel drops a dead process's lock, so a lock file left by a killed job
// is free and its stale PID is only mentioned. A `train` started by `launch` finds SHARDLM_SUPERVISOR
// (supervisor_env) and takes only the ranks lock once it has checked that its supervisor holds the job
// lock. The locks rely on flock working on the directory's file system (local disks, NFS v4, Lustre
// and GPFS with their flock options).
#pragma once
#include <memory>
#include <string>

namespace shardlm::train {

enum class RunLockKind { Job, Ranks };

class RunLock {
public:
    // Takes the lock of kind k in dir (created if missing) or returns null with *holder set to who
    // holds it ("PID 123 on h (shardlm train, since 2026-12-07 12:03:04)"). On success *holder is the
    // dead process whose lock file was left ("" if none): a stale lock, taken over.
    static std::unique_ptr<RunLock> try_take(const std::string& dir, RunLockKind k, std::string* holder);
    ~RunLock();
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;

private:
    explicit RunLock(int fd) : fd_(fd) {}
    int fd_;
};

// Who holds the lock of kind k in dir, as above; "" when it is free (or the directory has none).
std::string run_lock_holder(const std::string& dir, RunLockKind k);
// The PID written in the lock file of kind k (0: none), whether or not it is still held.
long run_lock_pid(const std::string& dir, RunLockKind k);

// The environment variable `launch` sets for its attempts: "pid start-time host" of the supervisor.
inline constexpr const char* kSupervisorEnv = "SHARDLM_SUPERVISOR";
// This process's value for it.
std::string supervisor_env_value();
// The supervisor's PID from SHARDLM_SUPERVISOR (0: not under one).
long supervisor_pid();
// True when SHARDLM_SUPERVISOR names a process on this host that no longer runs (the PID is gone or
// now belongs to a process started at another time). False when there is none, or it runs elsewhere.
bool supervisor_gone();

}  // namespace shardlm::train
