// core/trace.h: a timeline of what each thread of this process did, for Chrome's trace viewer /
// Perfetto (train --trace FILE.json): forward and backward passes, sends and receives, every
// collective and the optimiser step, each with its start and end (now_s(): steady_clock, one clock
// for every process of a machine).
//
// Recording is off unless enabled, and then costs one mutex per event; events of the communication
// thread and of the training thread go to their own tracks.
#pragma once
#include <string>
#include <vector>

namespace shardlm::trace {

struct Event {
    std::string name;   // "F3", "all_reduce", "optimizer_step", ...
    std::string track;  // "compute", "tp", "dp", "pp", "comm thread", ...
    double t0 = 0, t1 = 0;
    std::string args;   // JSON object members, e.g. "\"bytes\": 1024" (may be empty)
};

void enable(bool on);
bool enabled();
void record(std::string name, std::string track, double t0, double t1, std::string args = "");
// Takes every event recorded so far (the buffer is emptied).
std::vector<Event> take();

// Records [construction, destruction) when tracing is on.
class Scope {
public:
    Scope(const char* name, const char* track, std::string args = "");
    Scope(std::string name, const char* track, std::string args = "");
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    std::string name_, args_;
    const char* track_;
    double t0_ = -1;
};

}  // namespace shardlm::trace
