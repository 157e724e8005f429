//! The REST router over a simulated host on a loopback TCP port, without authentication: the
//! server schemathesis (`tests/schemathesis/run`) tests against. Never for production: every
//! caller is trusted, so it refuses any address but loopback.
//!
//! `cargo run -p api --example rest_sim_server -- [--profile dgx-a100] [--listen 127.0.0.1:18080]`

use std::net::SocketAddr;

use agent::engine::{Engine, EngineConfig};
use agent::service::Service;
use api::rest::{self, Caller, RestOptions};
use axum::extract::Request;
use axum::middleware::{self, Next};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

async fn trusted(mut req: Request, next: Next) -> axum::response::Response {
    req.extensions_mut().insert(Caller::Local {
        what: "rest_sim_server on loopback".into(),
    });
    next.run(req).await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let profile = arg("--profile", "dgx-a100");
    let listen: SocketAddr = arg("--listen", "127.0.0.1:18080").parse()?;
    anyhow::ensure!(
        listen.ip().is_loopback(),
        "{listen}: this test server listens on loopback only"
    );
    let dir = tempfile::tempdir()?;
    let sim = sim::SimHost::new(sim::Profile::builtin(&profile)?)?;
    let engine = Engine::open(EngineConfig::new(dir.path(), hostwire::sim_access(&sim)))?;
    engine.reconcile()?;
    let router = rest::router(Service::new(engine), RestOptions::default())
        .layer(middleware::from_fn(trusted));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("rest_sim_server: {profile} on http://{listen}");
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
