// platform/cpu.h: what CPU this is, as /proc/cpuinfo and oneDNN see it: the first processor's model
// name, family, model and flags (the GEMM choices' cache is per CPU model), and the instruction set
// oneDNN runs on (ONEDNN_MAX_CPU_ISA respected).
#pragma once
#include <set>
#include <string>

namespace shardlm::platform {

// /proc/cpuinfo's first processor: its model name ("unknown CPU" if none), family, model and flags.
struct CpuId {
    std::string name = "unknown CPU", family, model;
    std::set<std::string> flags;
};
const CpuId& cpu_id();

// oneDNN's effective ISA ("avx512_core_amx", ...) and the ONEDNN_MAX_CPU_ISA that set it ("" if unset).
std::string onednn_isa();
std::string onednn_max_isa_env();

}  // namespace shardlm::platform
