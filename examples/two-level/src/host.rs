//! One host's vgpud, spoken to over its unix socket with vgpuctl's client: the dry run
//! (`POST /v1/placement-score`) and the allocation (`POST /v1/allocations`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};
use uuid::Uuid;
use vgpuctl::client::{Client, Failure};

use crate::workload::Want;

/// A vgpud's answer to the dry run.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    /// Whether the host would take the request now.
    pub feasible: bool,
    /// Higher is better.
    pub score: f64,
    /// The GPUs (canonical PCI addresses) the slices would go to.
    pub gpus: Vec<String>,
}

/// Why a vgpud did not allocate.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The error code (`no_capacity`, `quarantined`, …), or `unreachable`.
    pub code: String,
    /// The message.
    pub message: String,
}

/// The vgpud of one host.
pub struct Vgpud {
    socket: PathBuf,
    client: Client,
    runtime: tokio::runtime::Runtime,
}

impl Vgpud {
    /// The vgpud serving `socket`.
    pub fn new(socket: &Path) -> anyhow::Result<Vgpud> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("a runtime for the vgpud client")?;
        Ok(Vgpud {
            socket: socket.to_owned(),
            client: Client::new(socket),
            runtime,
        })
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// One call; the JSON answer, or the server's refusal.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Refusal> {
        self.runtime
            .block_on(self.client.call(method, path, &[], body))
            .map(|a| a.body)
            .map_err(refusal)
    }

    /// The dry run for `want` (nothing changes on the host).
    pub fn score(&self, want: &Want) -> Result<Score, Refusal> {
        let body = json!({"type": want.slice_type, "count": want.count});
        let answer = self.call("POST", "/v1/placement-score", Some(&body))?;
        Ok(Score {
            feasible: answer["feasible"].as_bool().unwrap_or(false),
            score: answer["score"].as_f64().unwrap_or(f64::MIN),
            gpus: answer["placements"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["gpu"].as_str().map(str::to_owned))
                .collect(),
        })
    }

    /// Allocates `want` for the Placement consumer `consumer` (also the vgpud consumer name),
    /// on `gpu` when Placement chose one GPU; the allocation's id.
    pub fn allocate(
        &self,
        want: &Want,
        consumer: Uuid,
        gpu: Option<&str>,
    ) -> Result<String, Refusal> {
        let mut request = json!({"type": want.slice_type, "count": want.count});
        if let Some(gpu) = gpu {
            request["gpu"] = json!(gpu);
        }
        let body = json!({
            "consumer": consumer.to_string(),
            "placement_consumer": consumer,
            "request": request,
        });
        let answer = self.call("POST", "/v1/allocations", Some(&body))?;
        Ok(answer["id"].as_str().unwrap_or_default().to_owned())
    }
}

fn refusal(f: Failure) -> Refusal {
    match f {
        Failure::Server { code, message, .. } => Refusal { code, message },
        Failure::Connect(message) => Refusal {
            code: "unreachable".to_owned(),
            message,
        },
        Failure::Other(message) => Refusal {
            code: "bad_answer".to_owned(),
            message,
        },
    }
}
