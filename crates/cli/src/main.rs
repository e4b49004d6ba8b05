//! `flotilla`: one binary, one subcommand per role.

fn main() -> std::process::ExitCode {
    flotilla_cli::Args::parse_and_run()
}
