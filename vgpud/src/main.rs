//! The `vgpud` binary: a thin shell over the `vgpud` library so incremental builds stay fast.

fn main() -> std::process::ExitCode {
    vgpud::cli::main()
}
