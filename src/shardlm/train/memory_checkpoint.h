// train/memory_checkpoint.h: checkpoints kept in memory and on a replica (--mem-ckpt-every N), so that a
// restart after a lost rank loses at most the step it was in and reads nothing from disk.
//
// Every N steps each rank writes the files of a checkpoint (train/checkpoint.h: the same files, the same
// checksums) into its store, a directory in node-local memory (--mem-ckpt-dir, /dev/shm: tmpfs), and sends
// them over MPI to its partner, which keeps them in its own store; every store also holds meta.json and
// config.json. The partner is on another host: the next data-parallel replica (same tensor, context and
// pipeline coordinates) when every rank's is, else the rank as far along the ranks ordered by host as the
// largest host has ranks (with hosts of one size, every copy lands on another host; rank 0 names any that
// does not). A store is
//     <mem-ckpt-dir>/shardlm-<hash of the run directory's path>/<run>/<host>/rank<r>/ckpt_<step>/
// where <run> is the id in RUN_DIR/memory_checkpoints.json, new at every fresh start, so that no restart takes
// another run's memory. A save writes .ckpt_<step>.tmp and renames it; the older step is removed once every
// store holds the new one (a barrier): a kill during a save leaves the new step or the one before it whole,
// a kill between steps the new one. The stores outlive the processes (MPI without fault tolerance ends the
// whole job when a rank dies, survivors included): a node's memory is lost only with the node. A save that
// fails on some rank (a full tmpfs) is dropped on every rank, said once, and the run goes on without them.
//
// A restart (--resume) first looks for the newest checkpoint the stores hold together, across the hosts
// (recover): if it is newer than the newest on disk, every host assembles it in a directory of its memory
// (hard links into its stores; a file no store of the host holds, another host's part or a lost node's, is
// sent by a rank of a host that holds it over MPI), checks every checksum, and the ranks load it as they load
// a checkpoint from disk: under any layout, bit-exact where the layout is the one that wrote it. Anything
// wrong on the way (a damaged copy, a full tmpfs) is said and the disk is read instead.
//
// A run that ends at --steps removes the stores on the hosts of its last attempt; a fresh start (no --resume)
// removes what earlier runs of the same directory left on its hosts.
//
// Hosts: by hostname. SHARDLM_MEM_CKPT_HOSTS=per-rank makes every rank a host of its own ("rank<r>"), so
// that one machine can stand for several: deleting <...>/rank<r>/ is then a lost node's memory.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

// The stores of the run in cfg.output.out under its current id, every host's ("" if it has none yet).
std::string memory_checkpoint_root(const TrainConfig& cfg);

// The newest step of a checkpoint with meta.json in any store under memory_checkpoint_root on this machine
// (-1 if none): what a restart can resume from memory, as far as this machine can see (launch's report).
int newest_memory_checkpoint_step(const TrainConfig& cfg);

// What recover found and did.
struct MemoryRecovery {
    int step = -1;          // -1: nothing to recover from memory (read the disk)
    std::string dir;        // this host's assembled checkpoint (remove with release())
    double local_mb = 0;    // linked from the hosts' own stores
    double mpi_mb = 0;      // received over MPI (files no store of the host held: another host's, a lost node's)
};

struct Census;  // what every host's stores hold (memory_checkpoint.cpp)

// The world rank each rank sends its copy to (see above): next[r] is rank r's next data-parallel replica
// (or the next rank), hosts[r] its host. -1 for a single rank.
std::vector<int> choose_partners(const std::vector<int>& next, const std::vector<std::string>& hosts);

class MemoryCheckpoints {
public:
    // Collective over world (the hosts of its ranks, the run's id). next: as choose_partners takes it.
    MemoryCheckpoints(const TrainConfig& cfg, comm::Group& world, const std::vector<int>& next);

    // Collective: p's files into this rank's store and its partner's, then the older step removed. After a
    // failed save (said on rank 0), enabled() is false.
    void save(PendingCheckpoint& p);
    bool enabled() const { return enabled_; }
    // Collective: the newest checkpoint held in memory at step >= at_least (the same on every rank),
    // assembled on every host (step -1: none, or one that could not be assembled, said on rank 0).
    MemoryRecovery recover(int at_least);
    // Collective: the assembled directory removed (after every rank loaded it).
    void release(MemoryRecovery& r);
    // Collective: the stores of the run on the hosts of this job removed (a run that ended); with
    // earlier_runs, every earlier run's of the same directory too (a fresh start).
    void clear(bool earlier_runs = false);

    int partner() const { return partner_; }
    std::string host_dir() const;  // this host's stores: <root>/<host>

private:
    std::string store() const;  // this rank's
    bool host_leader() const;   // the lowest world rank of its host
    // save's parts: what went wrong on this rank ("" if nothing), agreed on by every rank
    std::string write_own(const std::vector<std::pair<std::string, std::string>>& mine, const std::string& tmp);
    std::string exchange_with_partner(const std::vector<std::pair<std::string, std::string>>& mine, const std::string& dir);
    void prune_host();
    // recover's parts
    std::string assemble(const Census& c, const std::pair<int, std::string>& snap, MemoryRecovery& r);
    std::string check_assembled(const std::string& dir) const;
    std::string first_problem(const std::string& mine);  // collective: the lowest rank's problem, or ""

    comm::Group& world_;
    std::string runs_, root_, host_;  // runs_: every run's of this directory; root_: this run's
    std::vector<std::string> hosts_;  // each world rank's
    int partner_ = -1, from_ = -1;
    bool pruned_ = false;   // prune_host done
    bool enabled_ = true;   // no save failed
};

}  // namespace shardlm::train
