// cli/cmd_encode.cpp: `shardlm encode` (UTF-8 text on stdin -> JSON array of GPT-2 token ids on stdout)
// and `shardlm decode` (JSON array of ids on stdin -> the text, exactly, on stdout).
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/cli/commands.h"
#include "shardlm/core/check.h"
#include "shardlm/data/token_ids.h"
#include "shardlm/data/tokenizer.h"

namespace shardlm::cli {

namespace {

struct CodecOptions {
    bool allow_special = false;
    std::string vocab;
};

std::string read_stdin() {
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) s.append(buf, n);
    SHARDLM_CHECK(!std::ferror(stdin), "cannot read stdin: ", std::strerror(errno));
    return s;
}

void write_stdout(const std::string& s) {
    if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) {
        fail("cannot write stdout: ", std::strerror(errno));
    }
    SHARDLM_CHECK(std::fflush(stdout) == 0, "cannot write stdout: ", std::strerror(errno));
}

data::Gpt2Tokenizer load_tokenizer(const std::string& vocab) {
    return data::Gpt2Tokenizer::load(vocab.empty() ? data::default_vocab_dir() : vocab);
}

void run_encode(const CodecOptions& o) {
    const data::Gpt2Tokenizer tok = load_tokenizer(o.vocab);
    const std::vector<int> ids = tok.encode(read_stdin(), o.allow_special);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(ids[i]);
    }
    out += "]\n";
    write_stdout(out);
}

void run_decode(const CodecOptions& o) {
    const std::vector<int> ids = data::parse_token_ids(read_stdin());
    const data::Gpt2Tokenizer tok = load_tokenizer(o.vocab);
    write_stdout(tok.decode(ids));
}

}  // namespace

void add_encode_command(CLI::App& app) {
    const std::string vocab_help =
        "Directory with encoder.json and vocab.bpe (default: $SHARDLM_DATA/gpt2, else <repo>/data/gpt2)";

    auto enc_opts = std::make_shared<CodecOptions>();
    CLI::App* enc = app.add_subcommand(
        "encode", "Encode UTF-8 text from stdin into GPT-2 token ids (a JSON array on stdout)");
    enc->add_flag("--allow-special", enc_opts->allow_special,
                  "Encode the text <|endoftext|> as the end-of-text token 50256 (else it is plain text)");
    enc->add_option("--vocab", enc_opts->vocab, vocab_help);
    enc->callback([enc_opts] { run_encode(*enc_opts); });

    auto dec_opts = std::make_shared<CodecOptions>();
    CLI::App* dec = app.add_subcommand(
        "decode", "Decode a JSON array of GPT-2 token ids from stdin into text on stdout");
    dec->add_option("--vocab", dec_opts->vocab, vocab_help);
    dec->callback([dec_opts] { run_decode(*dec_opts); });
}

}  // namespace shardlm::cli
