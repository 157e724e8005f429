//! Serves the D-Bus API over a simulated host, for `tests/dbus/run` and for trying `busctl`
//! without the whole daemon.
//!
//! ```text
//! DBUS_SYSTEM_BUS_ADDRESS=unix:path=/tmp/bus cargo run -p api --example dbus_sim -- \
//!     --profile dgx-a100 --state-dir /tmp/vgpud-state
//! ```
//!
//! Prints `ready <unique name>` once the name is taken and serves until killed. Exits 2 when
//! another connection owns the name.

use std::error::Error;
use std::path::PathBuf;

use agent::engine::{Engine, EngineConfig};
use agent::service::Service;
use hostwire::{HostChoice, open_sim, sim_access};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut profile = "dgx-a100".to_owned();
    let mut state_dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--profile" => profile = args.next().ok_or("--profile needs a value")?,
            "--state-dir" => {
                state_dir = Some(args.next().ok_or("--state-dir needs a value")?.into())
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let state_dir = state_dir.ok_or("--state-dir is required")?;
    let sim = open_sim(&HostChoice::Sim {
        profile,
        state_dir: None,
    })?
    .ok_or("no simulated host")?;
    let engine = Engine::open(EngineConfig::new(&state_dir, sim_access(&sim)))?;
    engine.reconcile()?;
    let service = Service::new(engine);
    let conn = match api::dbus::serve(service).await {
        Ok(conn) => conn,
        Err(zbus::Error::NameTaken) => {
            eprintln!("{} is owned by another connection", api::dbus::BUS_NAME);
            std::process::exit(2);
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "ready {}",
        conn.unique_name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    );
    std::future::pending::<()>().await;
    Ok(())
}
