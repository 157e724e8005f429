//! The `vgpud` binary: a thin shell over the `agent` library so incremental builds stay fast.

fn main() -> std::process::ExitCode {
    agent::cli::main()
}
