// bench/bench_tokenizer.cpp: GPT-2 encode throughput on one thread over the State of the Union corpus
// (data/sotu/raw/*.txt, from tools/fetch_assets.sh), once with an empty merge cache and once warm.
//   bench_tokenizer [CORPUS_DIR] [--vocab DIR]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/io/atomic_file.h"

namespace fs = std::filesystem;
using shardlm::data::Gpt2Tokenizer;

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    try {
        std::string vocab = shardlm::data::default_vocab_dir();
        std::string corpus = (fs::path(vocab).parent_path() / "sotu" / "raw").string();
        for (int i = 1; i < argc; ++i) {
            if (std::strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) {
                vocab = argv[++i];
            } else {
                corpus = argv[i];
            }
        }
        SHARDLM_CHECK(fs::is_directory(corpus), "bench_tokenizer: corpus directory '", corpus, "' not found",
                      "\n---> HINT: run tools/fetch_assets.sh");
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(corpus)) {
            if (e.path().extension() == ".txt") files.push_back(e.path());
        }
        std::sort(files.begin(), files.end());
        SHARDLM_CHECK(!files.empty(), "bench_tokenizer: no *.txt in '", corpus, "'");
        std::vector<std::string> docs;
        size_t bytes = 0;
        for (const auto& f : files) {
            docs.push_back(shardlm::io::read_file(f.string()));
            bytes += docs.back().size();
        }

        double t0 = shardlm::now_s();
        Gpt2Tokenizer tok = Gpt2Tokenizer::load(vocab);
        double t_load = shardlm::now_s() - t0;
        std::printf("bench_tokenizer: %zu documents, %.2f MB, vocabulary loaded in %.0f ms\n", docs.size(),
                    bytes / 1e6, t_load * 1e3);

        std::vector<int> ids;
        for (const char* pass : {"cold cache", "warm cache"}) {
            size_t tokens = 0;
            t0 = shardlm::now_s();
            for (const auto& d : docs) {
                ids.clear();
                tok.encode_append(d, ids);
                tokens += ids.size();
            }
            double dt = shardlm::now_s() - t0;
            std::printf("encode (%s): %zu tokens in %.3f s: %.2f MB/s, %.2f M tokens/s, %.3f bytes/token\n", pass,
                        tokens, dt, bytes / 1e6 / dt, tokens / 1e6 / dt, double(bytes) / double(tokens));
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
