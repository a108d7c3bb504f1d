#include "shardlm/platform/cpu.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace shardlm::platform {

namespace {

std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
        case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
        case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
        case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
        case dnnl_cpu_isa_avx512_core: return "avx512_core";
        case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
        case dnnl_cpu_isa_avx2: return "avx2";
        case dnnl_cpu_isa_avx: return "avx";
        case dnnl_cpu_isa_sse41: return "sse41";
        default: return "other";
    }
}

}  // namespace

const CpuId& cpu_id() {
    static const CpuId id = [] {
        CpuId c;
        bool named = false;
        std::ifstream f("/proc/cpuinfo");
        for (std::string line; std::getline(f, line);) {
            if (line.empty() && named) break;  // the first processor's block only
            const size_t colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string key = line.substr(0, colon);
            key.erase(key.find_last_not_of(" \t") + 1);
            const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
            if (key == "model name") c.name = value, named = true;
            if (key == "cpu family") c.family = value;
            if (key == "model") c.model = value;
            if (key == "flags") {
                std::istringstream in(value);
                for (std::string t; in >> t;) c.flags.insert(t);
            }
        }
        return c;
    }();
    return id;
}

std::string onednn_isa() { return onednn_isa_name(dnnl_get_effective_cpu_isa()); }

std::string onednn_max_isa_env() {
    const char* e = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (!e || !*e) e = std::getenv("DNNL_MAX_CPU_ISA");  // the older name oneDNN still reads
    return e ? e : "";
}

}  // namespace shardlm::platform
