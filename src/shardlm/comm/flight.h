// comm/flight.h: the flight recorder. Every rank keeps a ring buffer of its last N communication
// operations (collectives and point-to-point), and writes it to a file when the job goes wrong, so
// that a hang can be explained after the fact: which rank did not enter which collective.
//
// Recorded per operation: an id (this process's issue order), the group (name and world ranks of its
// members), a sequence number (the n-th collective this rank issued on that group; for
// point-to-point, the n-th message to or from that peer in that direction), the kind, the payload
// bytes, the peer and tag (point-to-point), the state (queued -> running -> done | failed) and the
// times of each change (seconds on this process's steady clock; the dump holds its own "now").
// Collectives of one group must be issued in the same order on every member, so the n-th collective
// of a group is the same operation on every rank: where ranks disagree (one never reached it, or
// they issued different kinds or sizes) is where the job went wrong (analyse(), `shardlm report
// --flight DIR`).
//
// Dumps: flight/rank<R>.json in the directory given to set_dump_dir(), written on a fatal error
// (dump()), on SIGUSR1 (the job goes on) and on SIGTERM (how mpirun ends the other ranks after one
// failed). Signals only wake a watcher thread that writes the file (async-signal-safe).
// Recording costs one short mutex per operation (not per ring segment).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/comm/op.h"

namespace shardlm::comm {

namespace flight {

enum class State { Queued, Running, Done, Failed };
const char* state_name(State s);

// Capacity of the ring (operations kept); 0 turns recording off. Default 4096.
void set_capacity(size_t n);
// Where dumps go (created when a dump is written); empty: no dumps (the default).
void set_dump_dir(const std::string& dir);
const std::string& dump_dir();
// Installs SIGUSR1 (dump and go on) and starts the watcher thread; SIGTERM handlers call poke(). From then on
// SIGUSR1, SIGINT, SIGTERM and SIGUSR2 never reach a thread that computes: the calling thread and its OpenMP team block
// them, and the threads they start inherit that (a handler never interrupts a product: flight.cpp); the
// watcher thread takes them (or threads started before, such as Open MPI's).
void install_signal_dump();
// Asks the watcher thread to dump (async-signal-safe); reason: a short static string.
void poke(const char* reason);
// Writes this rank's records now; returns the file written ("" when no dump directory is set).
std::string dump(const std::string& reason);
// The records as JSON (what dump() writes).
nlohmann::json snapshot(const std::string& reason);
// What the job last finished, beside its operations: the trainer's metrics row of its last step
// (train/run_output.h: stats_json: the step, loss, gradient norm and, for a mixture of experts, each
// layer's expert loads, the shares that sized its all-to-alls). Every dump carries it as "last_step";
// analyse() prints the step each rank reached and the loads. Empty (the default): none.
void set_last_step(std::string metrics_row);

// ---- recording (comm/group.cpp and comm/progress.cpp) --------------------------------------------
struct GroupInfo {
    std::string name;
    std::vector<int> members;  // world ranks
};
// The recorder's index of a group (the same name and members: the same index). A Group asks once,
// and again only when it is renamed, not per operation.
int register_group(const GroupInfo& g);
// Records op as issued on the group registered as `group` (op->flight_* are set); peer: world rank of
// a point-to-point peer (-1 for collectives), send: direction of a point-to-point op.
void issued(detail::Op& op, int group, uint64_t seq, uint64_t payload, int peer, int tag, bool send);
void started(const detail::Op& op);
void finished(const detail::Op& op, bool ok);

// ---- reading (shardlm report --flight, shardlm launch) -----------------------------------------
// Reads every rank*.json under dir and explains what they show: for each group, the first sequence
// number where the ranks disagree (a rank that never issued it, or different operations), the rank
// that did not enter, and how long the others waited. Returns the text (one finding per paragraph;
// "no disagreement" when the dumps agree). Throws when dir holds no dump.
// stalled (if given) receives the world ranks named as stalled.
std::string analyse(const std::string& dir, std::vector<int>* stalled = nullptr);
// The same over dumps already read (for tests).
std::string analyse(const std::vector<nlohmann::json>& dumps, std::vector<int>* stalled = nullptr);

}  // namespace flight
}  // namespace shardlm::comm
