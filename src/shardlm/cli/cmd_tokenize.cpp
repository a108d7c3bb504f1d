// cli/cmd_tokenize.cpp: `shardlm tokenize INPUT... --out DIR`: text files -> llm.c token shards.
// Each file is one document. Like llm.c / nanoGPT, every document is preceded by <|endoftext|> (50256)
// and its text is encoded as plain text (a literal "<|endoftext|>" inside is not special). The last
// documents go to DIR/<name>_val.bin until it holds at least --val-fraction of all tokens (at least
// one document); the others, in order, to DIR/<name>_train.bin. --normalize punct rewrites
// typographic punctuation to ASCII first (data/normalize.h); the default, none, encodes the files as they are.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/cli/commands.h"
#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/data/normalize.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/data/utf8.h"
#include "shardlm/io/atomic_file.h"

namespace shardlm::cli {

namespace {

namespace fs = std::filesystem;

struct TokenizeOptions {
    std::vector<std::string> inputs;
    std::string out;
    double val_fraction = 0.015;
    std::string vocab;
    std::string name = "sotu";
    std::string normalize = "none";
};

// Files in command-line order; a directory contributes every *.txt below it, sorted by path.
std::vector<std::string> collect_documents(const std::vector<std::string>& inputs) {
    std::vector<std::string> docs;
    for (const std::string& in : inputs) {
        std::error_code ec;
        const fs::file_status st = fs::status(in, ec);
        SHARDLM_CHECK(!ec && fs::exists(st), "tokenize: input '", in, "' not found");
        if (fs::is_directory(st)) {
            std::vector<std::string> found;
            const auto opts = fs::directory_options::follow_directory_symlink;
            for (const auto& e : fs::recursive_directory_iterator(in, opts)) {
                if (e.is_regular_file() && e.path().extension() == ".txt") found.push_back(e.path().string());
            }
            SHARDLM_CHECK(!found.empty(), "tokenize: directory '", in, "' has no *.txt files",
                          "\n---> HINT: pass text files, or a directory of *.txt (tools/fetch_assets.sh puts the "
                          "State of the Union speeches in data/sotu/raw)");
            std::sort(found.begin(), found.end());
            docs.insert(docs.end(), found.begin(), found.end());
        } else {
            docs.push_back(in);
        }
    }
    return docs;
}

class Progress {
public:
    explicit Progress(size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) == 1), t0_(now_s()) {}

    void update(size_t done, size_t bytes) {
        const double t = now_s();
        const bool last = done == total_;
        if (tty_) {
            if (!last && t - shown_ < 0.1) return;
            shown_ = t;
            constexpr int kWidth = 30;
            const int fill = total_ ? int(kWidth * done / total_) : kWidth;
            std::string bar(size_t(fill), '=');
            if (fill < kWidth) bar += '>' + std::string(size_t(kWidth - fill - 1), ' ');
            std::fprintf(stderr, "\rtokenize [%s] %zu/%zu documents  %.1f MB  %.1f MB/s\033[K", bar.c_str(), done,
                         total_, bytes / 1e6, rate(bytes, t));
            if (last) std::fputc('\n', stderr);
        } else {
            // About ten plain lines, whatever the number of documents.
            const size_t step = std::max<size_t>(1, (total_ + 9) / 10);
            if (!last && done % step != 0) return;
            std::fprintf(stderr, "tokenize: %zu/%zu documents, %.1f MB, %.1f MB/s\n", done, total_, bytes / 1e6,
                         rate(bytes, t));
        }
        std::fflush(stderr);
    }

private:
    double rate(size_t bytes, double t) const { return t > t0_ ? bytes / 1e6 / (t - t0_) : 0.0; }

    size_t total_;
    bool tty_;
    double t0_;
    double shown_ = -1.0;
};

void run_tokenize(const TokenizeOptions& o) {
    SHARDLM_CHECK(!o.name.empty() && o.name.find('/') == std::string::npos, "tokenize: --name '", o.name,
                  "' must be a non-empty file name prefix without '/'");
    SHARDLM_CHECK(o.val_fraction >= 0.0 && o.val_fraction <= 1.0, "tokenize: --val-fraction ", o.val_fraction,
                  " must be in [0, 1]");
    const std::vector<std::string> docs = collect_documents(o.inputs);
    SHARDLM_CHECK(!docs.empty(), "tokenize: no input documents");
    const data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(o.vocab.empty() ? data::default_vocab_dir() : o.vocab);

    // Encode everything first: the split depends on the total.
    std::vector<uint16_t> tokens;
    std::vector<size_t> doc_end(docs.size());  // tokens[doc_end[i-1], doc_end[i]) is document i
    std::vector<int> ids;
    size_t bytes = 0;
    const double t0 = now_s();
    Progress progress(docs.size());
    for (size_t i = 0; i < docs.size(); ++i) {
        const std::string raw = io::read_file(docs[i]);
        const std::string why = data::binary_reason(raw);
        SHARDLM_CHECK(why.empty(), "tokenize: '", docs[i], "' is not UTF-8 text: ", why,
                      "\n---> HINT: remove it from the input (a directory contributes every *.txt below it), or "
                      "convert it to UTF-8 (iconv -f latin1 -t utf-8)");
        bytes += raw.size();
        const std::string text = data::normalize_text(raw, o.normalize);
        ids.clear();
        ids.push_back(tok.eot_id());
        tok.encode_append(text, ids);
        for (int id : ids) tokens.push_back(uint16_t(id));  // ids < 50257 < 65536
        doc_end[i] = tokens.size();
        progress.update(i + 1, bytes);
    }
    const double dt = now_s() - t0;

    // Validation: the last documents, until at least val_fraction of all tokens (at least one document
    // unless val_fraction is 0).
    const size_t total = tokens.size();
    size_t first_val = docs.size();
    size_t val_tokens = 0;
    while (o.val_fraction > 0 && first_val > 0 &&
           (first_val == docs.size() || double(val_tokens) < o.val_fraction * double(total))) {
        --first_val;
        val_tokens = total - (first_val ? doc_end[first_val - 1] : 0);
    }
    const size_t train_tokens = total - val_tokens;
    const size_t n_val = docs.size() - first_val, n_train = first_val;
    // A split that leaves nothing to train on, or gives validation most of the tokens because the last
    // document is large, is a mistake: say so before writing anything.
    SHARDLM_CHECK(n_train > 0, "tokenize: ", docs.size(), " document", docs.size() > 1 ? "s" : "",
                  ": the validation split (the last documents, at least one) takes ", docs.size() > 1 ? "all" : "it",
                  " and leaves the training shard empty",
                  "\n---> HINT: give more documents (one file = one document), or --val-fraction 0 to put everything "
                  "in the training shard");
    const double val_share = total ? double(val_tokens) / double(total) : 0.0;
    SHARDLM_CHECK(val_share <= std::max(0.5, 2 * o.val_fraction), "tokenize: the validation split would hold ",
                  int(100 * val_share + 0.5), " % of the tokens (--val-fraction ", o.val_fraction, "): its first document '",
                  docs[first_val], "' alone has ", doc_end[first_val] - (first_val ? doc_end[first_val - 1] : 0),
                  " of the ", total, " tokens",
                  "\n---> HINT: documents are split in order (sorted by path): put large documents earlier, or "
                  "choose --val-fraction to match them");

    fs::create_directories(o.out);
    const std::string train_path = (fs::path(o.out) / (o.name + "_train.bin")).string();
    const std::string val_path = (fs::path(o.out) / (o.name + "_val.bin")).string();
    const std::span<const uint16_t> all(tokens);
    data::write_token_shard(train_path, all.subspan(0, train_tokens));
    data::write_token_shard(val_path, all.subspan(train_tokens));
    const size_t text_tokens = total - docs.size();
    std::printf("tokenize: %zu documents (%zu train / %zu val), %.2f MB in %.2f s (%.1f MB/s)\n", docs.size(), n_train,
                n_val, bytes / 1e6, dt, dt > 0 ? bytes / 1e6 / dt : 0.0);
    std::printf("tokenize: %zu tokens (%zu train / %zu val, %.2f%% val), %zu of them <|endoftext|> separators\n",
                total, train_tokens, val_tokens, total ? 100.0 * double(val_tokens) / double(total) : 0.0,
                docs.size());
    if (o.normalize != "none") std::printf("tokenize: text normalized with '%s'\n", o.normalize.c_str());
    std::printf("tokenize: %.3f bytes per token (text bytes / text tokens)\n",
                text_tokens ? double(bytes) / double(text_tokens) : 0.0);
    std::printf("tokenize: wrote %s and %s\n", train_path.c_str(), val_path.c_str());
    std::fflush(stdout);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "tokenize", "Tokenize text files with GPT-2 BPE into llm.c token shards <name>_train.bin and <name>_val.bin");
    cmd->add_option("INPUT", o->inputs, "Text files (one document each) or directories (every *.txt below, sorted)")
        ->required();
    cmd->add_option("--out", o->out, "Output directory (created if missing)")->required();
    cmd->add_option("--val-fraction", o->val_fraction,
                    "Put the last documents in the validation shard until it holds this fraction of the tokens")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--vocab", o->vocab,
                    "Directory with encoder.json and vocab.bpe (default: $SHARDLM_DATA/gpt2, else <repo>/data/gpt2)");
    cmd->add_option("--name", o->name, "Shard file name prefix")->capture_default_str();
    cmd->add_option("--normalize", o->normalize,
                    "Text clean-up before encoding: none (files as they are) or punct (typographic quotes, dashes, "
                    "ellipsis and no-break spaces to ASCII)")
        ->capture_default_str()
        ->check(CLI::IsMember(data::normalizations()));
    cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace shardlm::cli
