//! `vgpud run --sim dgx-a100` with `[placement]` on, against a real Placement: the daemon's
//! reporter builds the tree at start, follows allocations made over REST (a local one as
//! `reserved`, a two-level one as the consumer's claim), refuses in strict mode an allocation
//! whose consumer holds nothing here, reports a consumer it does not know, and shows all of it
//! in `GET /v1/placement`, `vgpuctl host` and `/metrics`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use placement::model::{ConsumerAllocations, ProviderAllocation};
use placement::{Auth, Client, ClientConfig};
use serde_json::{Value, json};
use testkit::placement::PlacementPeer;
use torture::http;
use uuid::Uuid;

const ROOT: &str = "e2e-host";
/// The first GPU of the simulated DGX A100, on NUMA node 0.
const GPU: &str = "0000:07:00.0";

struct Daemon {
    dir: tempfile::TempDir,
    child: Child,
}

impl Daemon {
    fn start(peer: &PlacementPeer) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("vgpud.toml"),
            format!(
                "[engine]\nreconcile_interval_s = 30\n\n[placement]\nenabled = true\n\
                 endpoint = \"{}\"\nauth = \"noauth2\"\ntoken = \"admin\"\ncompute_node = \"{ROOT}\"\n\
                 own_root = true\nnuma_subtree = true\ndefault_type = \"1g.10gb\"\n\
                 on_demand_types = [\"1g.10gb\"]\nstrict_consumers = true\nsync_interval_s = 5\n\
                 debounce_ms = 200\n",
                peer.url()
            ),
        )
        .unwrap();
        let bin = torture::daemon::vgpud_binary().unwrap();
        let log = std::fs::File::create(dir.path().join("vgpud.log")).unwrap();
        let mut child =
            testkit::daemon::sim_run(&mut Command::new(bin), dir.path(), "dgx-a100", None)
                .stderr(log)
                .spawn()
                .unwrap();
        let read = || std::fs::read_to_string(dir.path().join("vgpud.log")).unwrap_or_default();
        testkit::daemon::wait_ready(&mut child, read, Duration::from_secs(60)).unwrap();
        Daemon { dir, child }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("api.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vgpud.log")).unwrap_or_default()
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let a = http::call(&self.socket(), method, path, None, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e:?}\n{}", self.log()));
        (a.status, a.body)
    }

    fn placement(&self) -> Value {
        self.call("GET", "/v1/placement", None).1
    }

    /// Waits until the reporter is in sync and `check` holds for its status.
    fn wait_status(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.placement();
            if s["in_sync"] == true && check(&s) {
                return s;
            }
            assert!(Instant::now() < until, "{what}: {s:#}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(peer: &PlacementPeer) -> Client {
    Client::new(ClientConfig {
        endpoint: Some(peer.url()),
        auth: Auth::NoAuth {
            token: "admin".into(),
        },
        ca_file: None,
        timeout: Duration::from_secs(10),
    })
    .unwrap()
}

fn gpu_provider(c: &Client) -> Uuid {
    let name = format!("{ROOT}_pci_{}", GPU.replace([':', '.'], "_"));
    c.provider_named(&name)
        .unwrap()
        .expect("the GPU's provider")
        .uuid
}

/// Claims `amount` of `class` on `provider` for a new consumer, as an upstream scheduler does.
fn claim(c: &Client, provider: Uuid, class: &str, amount: u32) -> Uuid {
    let consumer = Uuid::new_v4();
    let body = ConsumerAllocations {
        allocations: BTreeMap::from([(
            provider,
            ProviderAllocation {
                resources: BTreeMap::from([(class.to_owned(), amount)]),
                generation: None,
            },
        )]),
        consumer_generation: None,
        project_id: Some(Uuid::new_v4().to_string()),
        user_id: Some(Uuid::new_v4().to_string()),
        consumer_type: Some("INSTANCE".into()),
    };
    c.put_consumer_allocations(consumer, &body).unwrap();
    consumer
}

fn metrics(socket: &Path) -> String {
    let out = Command::new("curl")
        .args(["-sf", "--unix-socket"])
        .arg(socket)
        .arg("http://vgpud/metrics")
        .output()
        .expect("curl (Debian package curl; scripts/lib.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_daemon_reports_its_host_and_checks_two_level_allocations() {
    let Some(peer) = PlacementPeer::start().unwrap() else {
        return;
    };
    let d = Daemon::start(&peer);
    let status = d.wait_status("the first sync", |s| s["gpu_providers"] == 8);
    assert_eq!(status["root_name"], ROOT);
    let c = client(&peer);
    let provider = gpu_provider(&c);
    let vgpu = |c: &Client| c.inventories(provider).unwrap().inventories["VGPU"].clone();
    assert_eq!((vgpu(&c).total, vgpu(&c).reserved), (7, 0));

    // A local allocation (no consumer): Placement sees it as reserved.
    let (code, local) = d.call(
        "POST",
        "/v1/allocations",
        Some(&json!({"consumer": "ops", "request": {"type": "1g.10gb", "gpu": GPU}})),
    );
    assert_eq!(code, 201, "{local}");
    d.wait_status("the local allocation reported", |_| vgpu(&c).reserved == 1);

    // Two-level: the upstream scheduler claims VGPU:2 on the GPU, then vgpud allocates for
    // that consumer, on that GPU, without being told which.
    let consumer = claim(&c, provider, "VGPU", 2);
    let (code, alloc) = d.call(
        "POST",
        "/v1/allocations",
        Some(
            &json!({"consumer": "tenant", "request": {"type": "1g.10gb", "count": 2},
                     "placement_consumer": consumer.to_string()}),
        ),
    );
    assert_eq!(code, 201, "{alloc}\n{}", d.log());
    assert_eq!(alloc["placement_consumer"], consumer.to_string());
    for s in alloc["slices"].as_array().unwrap() {
        assert_eq!(s["gpu"], GPU, "{alloc}");
    }
    // Placement's usage is the consumer's claim; reserved still only the local slice.
    let status = d.wait_status("the two-level allocation reported", |_| {
        vgpu(&c).reserved == 1
    });
    assert_eq!(status["missing_in_placement"], 0, "{status}");

    // Strict: a consumer that holds nothing here is refused, and nothing is allocated.
    let stranger = Uuid::new_v4();
    let (code, refused) = d.call(
        "POST",
        "/v1/allocations",
        Some(
            &json!({"consumer": "tenant", "request": {"type": "1g.10gb"},
                     "placement_consumer": stranger.to_string()}),
        ),
    );
    assert_eq!(
        (code, refused["code"].as_str()),
        (409, Some("placement_mismatch")),
        "{refused}"
    );
    let (_, all) = d.call("GET", "/v1/allocations", None);
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");

    // A claim vgpud never saw an allocation for is reported (not healed: heal is off).
    let _orphan = claim(&c, provider, "VGPU", 1);
    let status = d.wait_status("the orphan claim seen", |s| s["unknown_to_vgpud"] == 1);
    assert_eq!(status["amount_mismatch"], 0, "{status}");

    let host = Command::new(
        torture::daemon::vgpud_binary()
            .unwrap()
            .with_file_name("vgpuctl"),
    )
    .arg("--socket")
    .arg(d.socket())
    .arg("host")
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&host.stdout);
    assert!(text.contains(&format!("compute node {ROOT}")), "{text}");
    assert!(text.contains("in sync"), "{text}");
    assert!(
        text.contains("1 Placement consumers vgpud does not know"),
        "{text}"
    );

    let m = metrics(&d.socket());
    assert!(m.contains("vgpud_placement_in_sync 1"), "{m}");
    assert!(
        m.contains("vgpud_placement_consumer_checks_total{outcome=\"match\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("vgpud_placement_consumer_checks_total{outcome=\"mismatch\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("vgpud_placement_allocation_differences{kind=\"unknown_to_vgpud\"} 1"),
        "{m}"
    );
}
