// cli/commands.h: every verb of the `shardlm` binary registers itself on the CLI11 app here.
// A verb lives in cli/cmd_<verb>.cpp and defines add_<verb>_command(app): it adds a subcommand,
// its flags, and a callback that does the work (throwing shardlm::Error on bad input).
#pragma once
#include <CLI/CLI.hpp>

namespace shardlm::cli {

void add_train_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_encode_command(CLI::App& app);    // encode + decode
void add_tokenize_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_plan_command(CLI::App& app);      // planner: memory and step time of parallel policies
void add_calibrate_command(CLI::App& app); // measure this machine into a planner cluster file
void add_launch_command(CLI::App& app);    // supervise train under mpirun: restart on the ranks left
void add_doctor_command(CLI::App& app);    // the machine, its kernels and the traps in the environment

}  // namespace shardlm::cli
