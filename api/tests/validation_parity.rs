//! One validation path for both front ends: the same over-long and malformed arguments, sent
//! through REST (the served router on a unix socket) and through D-Bus (a private `dbus-daemon`,
//! an authorized caller) to one service over a simulated DGX A100, get the same refusal with the
//! same machine code from both (REST's `code`, D-Bus's error name for it), and change nothing a
//! client can see. Each case is written once, as the request's arguments; both front ends' forms
//! are derived from it. The limits the OpenAPI document publishes are the shared ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dbus_common;
mod rest_common;

use std::collections::HashMap;

use agent::engine::limits::{
    MAX_COUNT, MAX_GPU_INDEX, MAX_IMPORT_CONFIG_CHARS, MAX_IMPORT_CONFIG_NAME_CHARS,
    MAX_IMPORT_DEFINITION_CHARS, MAX_IMPORT_DEFINITIONS, MAX_ITEMS, MAX_MEMORY_MIB, MAX_MIG_START,
    MAX_TEXT_CHARS, MAX_VCPUS,
};
use api::dbus::{self, DbusOptions, MANAGER_PATH, error_name_for_code};
use dbus_common::{Bus, FakePolkit, call, error_name};
use rest_common::{A100, Rig};
use serde_json::{Value, json};
use zbus::{Connection, OwnedObjectPath, OwnedVariant, Variant};

const MANAGER: &str = "io.vgpud.Agent1.Manager";

/// An `a{sv}` value.
#[derive(Debug, Clone)]
enum Opt {
    S(String),
    U(u32),
    T(u64),
}

fn options(pairs: &[(&str, Opt)]) -> HashMap<String, OwnedVariant> {
    pairs
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Opt::S(s) => Variant::from(s.clone()),
                Opt::U(n) => Variant::from(*n),
                Opt::T(n) => Variant::from(*n),
            };
            ((*k).to_owned(), OwnedVariant::try_from(v).unwrap())
        })
        .collect()
}

/// `Allocate` / `POST /v1/allocations`.
#[derive(Debug, Clone)]
struct Alloc {
    consumer: String,
    slice_type: String,
    count: u32,
    vm: Option<String>,
    gpu: Option<String>,
    key: Option<String>,
    numa_policy: Option<String>,
    vcpus: Option<u32>,
    memory_mib: Option<u64>,
}

impl Default for Alloc {
    fn default() -> Self {
        Alloc {
            consumer: "nova".into(),
            slice_type: "1g.10gb".into(),
            count: 1,
            vm: None,
            gpu: None,
            key: None,
            numa_policy: None,
            vcpus: None,
            memory_mib: None,
        }
    }
}

impl Alloc {
    fn body(&self) -> Value {
        let mut request = json!({"type": self.slice_type, "count": self.count});
        let r = request.as_object_mut().unwrap();
        if let Some(g) = &self.gpu {
            r.insert("gpu".into(), json!(g));
        }
        if let Some(p) = &self.numa_policy {
            r.insert("numa_policy".into(), json!(p));
        }
        if let Some(v) = self.vcpus {
            r.insert("vcpus".into(), json!(v));
        }
        if let Some(m) = self.memory_mib {
            r.insert("memory_mib".into(), json!(m));
        }
        let mut body = json!({"consumer": self.consumer, "request": request});
        if let Some(vm) = &self.vm {
            body["vm"] = json!(vm);
        }
        body
    }

    fn options(&self) -> HashMap<String, OwnedVariant> {
        let mut o = Vec::new();
        let text = |k: &'static str, v: &Option<String>, o: &mut Vec<(&str, Opt)>| {
            if let Some(v) = v {
                o.push((k, Opt::S(v.clone())));
            }
        };
        text("vm", &self.vm, &mut o);
        text("gpu", &self.gpu, &mut o);
        text("idempotency_key", &self.key, &mut o);
        text("numa_policy", &self.numa_policy, &mut o);
        if let Some(v) = self.vcpus {
            o.push(("vcpus", Opt::U(v)));
        }
        if let Some(m) = self.memory_mib {
            o.push(("memory_mib", Opt::T(m)));
        }
        options(&o)
    }
}

/// `CreateSlice` / `POST /v1/slices`.
#[derive(Debug, Clone)]
struct Create {
    gpu: String,
    backend: &'static str,
    slice_type: String,
    start: Option<u32>,
    consumer: Option<String>,
    vm: Option<String>,
}

impl Create {
    fn mig(profile: &str) -> Create {
        Create {
            gpu: A100.into(),
            backend: "mig",
            slice_type: profile.into(),
            start: None,
            consumer: None,
            vm: None,
        }
    }

    fn body(&self) -> Value {
        let mut kind = json!({"backend": self.backend});
        let param = match self.backend {
            "mdev" => Some(("type_id", json!(self.slice_type))),
            "mig" => Some(("profile", json!(self.slice_type))),
            "nvidia-vfio" => Some((
                "vgpu_type",
                self.slice_type
                    .parse::<u64>()
                    .map_or_else(|_| json!(self.slice_type), |n| json!(n)),
            )),
            _ => None,
        };
        if let Some((k, v)) = param {
            kind[k] = v;
        }
        if let Some(s) = self.start {
            kind["start"] = json!(s);
        }
        let mut body = json!({"gpu": self.gpu, "kind": kind});
        if let Some(c) = &self.consumer {
            body["owner"] = json!({"consumer": c});
            if let Some(vm) = &self.vm {
                body["owner"]["vm"] = json!(vm);
            }
        }
        body
    }

    fn options(&self) -> HashMap<String, OwnedVariant> {
        let mut o = Vec::new();
        if let Some(s) = self.start {
            o.push(("start", Opt::U(s)));
        }
        if let Some(c) = &self.consumer {
            o.push(("consumer", Opt::S(c.clone())));
        }
        if let Some(vm) = &self.vm {
            o.push(("vm", Opt::S(vm.clone())));
        }
        options(&o)
    }
}

/// One request, in the terms both front ends share.
#[derive(Debug, Clone)]
enum Request {
    Allocate(Alloc),
    CreateSlice(Create),
    /// The layouts, as the JSON array both take.
    Layouts(Value),
    Release(String),
    DestroySlice(String),
    AllocationJson(String),
}

/// What a front end answered: the machine code of its refusal, or `None` when it accepted.
type Refusal = Option<String>;

async fn through_rest(rig: &Rig, req: &Request) -> (Refusal, String) {
    let reply = match req {
        Request::Allocate(a) => {
            let body = serde_json::to_vec(&a.body()).unwrap();
            let mut headers = vec![("content-type", "application/json")];
            if let Some(k) = &a.key {
                headers.push(("idempotency-key", k.as_str()));
            }
            rig.call("POST", "/v1/allocations", &headers, Some(body))
                .await
        }
        Request::CreateSlice(c) => rig.post("/v1/slices", c.body()).await,
        Request::Layouts(l) => {
            rig.send_json("PUT", "/v1/layouts", &json!({"layouts": l}))
                .await
        }
        Request::Release(id) => rig.delete(&format!("/v1/allocations/{id}")).await,
        Request::DestroySlice(id) => rig.delete(&format!("/v1/slices/{id}")).await,
        Request::AllocationJson(id) => rig.get(&format!("/v1/allocations/{id}")).await,
    };
    if reply.status.is_success() {
        return (None, reply.text());
    }
    assert!(
        reply.status.is_client_error(),
        "{req:?}: REST answered {} {}",
        reply.status,
        reply.text()
    );
    (
        Some(reply.error_code()),
        reply.json()["message"].to_string(),
    )
}

async fn through_dbus(conn: &Connection, req: &Request) -> (Refusal, String) {
    let m = |method| (MANAGER_PATH, MANAGER, method);
    let result: zbus::Result<String> = match req {
        Request::Allocate(a) => {
            let (p, i, n) = m("Allocate");
            let args = (&a.consumer, &a.slice_type, a.count, a.options());
            call::<_, (String, Vec<OwnedObjectPath>)>(conn, p, i, n, &args)
                .await
                .map(|(id, _)| id)
        }
        Request::CreateSlice(c) => {
            let (p, i, n) = m("CreateSlice");
            let args = (&c.gpu, c.backend, &c.slice_type, c.options());
            call::<_, OwnedObjectPath>(conn, p, i, n, &args)
                .await
                .map(|o| o.to_string())
        }
        Request::Layouts(l) => {
            let (p, i, n) = m("ApplyLayouts");
            call(conn, p, i, n, &(l.to_string(),)).await
        }
        Request::Release(id) => {
            let (p, i, n) = m("Release");
            call::<_, ()>(conn, p, i, n, &(id,))
                .await
                .map(|()| id.clone())
        }
        Request::DestroySlice(id) => {
            let (p, i, n) = m("DestroySlice");
            call::<_, ()>(conn, p, i, n, &(id,))
                .await
                .map(|()| id.clone())
        }
        Request::AllocationJson(id) => {
            let (p, i, n) = m("AllocationJson");
            call(conn, p, i, n, &(id,)).await
        }
    };
    match result {
        Ok(answer) => (None, answer),
        Err(e) => (Some(error_name(&e)), e.to_string()),
    }
}

/// A served REST router and D-Bus objects over one service, and a D-Bus caller polkit allows.
struct Fronts {
    rig: Rig,
    _bus: Bus,
    _polkit: Connection,
    _served: Connection,
    client: Connection,
}

async fn fronts() -> Option<Fronts> {
    let bus = Bus::start()?;
    let rig = Rig::start("dgx-a100").await;
    let builder = zbus::connection::Builder::address(bus.address.as_str());
    let served = dbus::serve_with(rig.service.clone(), builder, DbusOptions::default())
        .await
        .unwrap();
    let (fake, polkit) = FakePolkit::serve(&bus).await;
    let client = bus.client().await;
    fake.allow(&client, "io.vgpud.manage");
    fake.allow(&client, "io.vgpud.layout");
    Some(Fronts {
        rig,
        _bus: bus,
        _polkit: polkit,
        _served: served,
        client,
    })
}

fn long(n: usize) -> String {
    "c".repeat(n)
}

fn alloc(f: impl FnOnce(&mut Alloc)) -> Request {
    let mut a = Alloc::default();
    f(&mut a);
    Request::Allocate(a)
}

fn create(mut c: Create, f: impl FnOnce(&mut Create)) -> Request {
    f(&mut c);
    Request::CreateSlice(c)
}

fn layout(l: Value) -> Request {
    Request::Layouts(json!([l]))
}

/// Every case and the code both front ends must refuse it with.
fn cases() -> Vec<(&'static str, Request, &'static str)> {
    let bad = "invalid_request";
    let mig = || Create::mig("3g.40gb");
    let entry = |t: &str, n: u32| json!({"name": "l", "slices": [{"type": t, "count": n}]});
    let unknown_id = "6f1c2b7a-0d3e-4c5b-9a8f-1e2d3c4b5a69";
    vec![
        // Free text: consumer, VM, type.
        ("200-char consumer", alloc(|a| a.consumer = long(200)), bad),
        ("65-char consumer", alloc(|a| a.consumer = long(65)), bad),
        (
            "65 two-byte chars in consumer",
            alloc(|a| a.consumer = "é".repeat(65)),
            bad,
        ),
        ("empty consumer", alloc(|a| a.consumer = String::new()), bad),
        (
            "newline in consumer",
            alloc(|a| a.consumer = "a\nb".into()),
            bad,
        ),
        (
            "C1 control in consumer",
            alloc(|a| a.consumer = "a\u{85}b".into()),
            bad,
        ),
        // Text that shows other than it is: bidi overrides and isolates, zero-width and tag
        // characters (they would reach the log and listings as they are).
        (
            "RLO override in consumer",
            alloc(|a| a.consumer = "nova\u{202e}gpj.exe".into()),
            bad,
        ),
        (
            "bidi isolate in vm",
            alloc(|a| a.vm = Some("\u{2066}vm-1\u{2069}".into())),
            bad,
        ),
        (
            "zero-width space in consumer",
            alloc(|a| a.consumer = "no\u{200b}va".into()),
            bad,
        ),
        (
            "tag characters in vm",
            alloc(|a| a.vm = Some("vm\u{e0041}\u{e0042}".into())),
            bad,
        ),
        (
            "BOM in type",
            alloc(|a| a.slice_type = "\u{feff}1g.10gb".into()),
            bad,
        ),
        ("200-char vm", alloc(|a| a.vm = Some(long(200))), bad),
        // Not NUL: a D-Bus string cannot carry one (the bus disconnects the sender).
        (
            "US control in vm",
            alloc(|a| a.vm = Some("vm\u{1f}1".into())),
            bad,
        ),
        ("empty vm", alloc(|a| a.vm = Some(String::new())), bad),
        (
            "BEL in type",
            alloc(|a| a.slice_type = "1g.10gb\u{7}".into()),
            bad,
        ),
        (
            "ESC in type",
            alloc(|a| a.slice_type = "\u{1b}[31m".into()),
            bad,
        ),
        ("65-char type", alloc(|a| a.slice_type = long(65)), bad),
        ("empty type", alloc(|a| a.slice_type = String::new()), bad),
        // Numbers out of range.
        ("count 0", alloc(|a| a.count = 0), bad),
        ("count 65", alloc(|a| a.count = MAX_COUNT + 1), bad),
        ("count u32::MAX", alloc(|a| a.count = u32::MAX), bad),
        ("vcpus 0", alloc(|a| a.vcpus = Some(0)), bad),
        ("vcpus 4097", alloc(|a| a.vcpus = Some(MAX_VCPUS + 1)), bad),
        ("vcpus u32::MAX", alloc(|a| a.vcpus = Some(u32::MAX)), bad),
        ("memory 0", alloc(|a| a.memory_mib = Some(0)), bad),
        (
            "memory 1 PiB + 1 MiB",
            alloc(|a| a.memory_mib = Some(MAX_MEMORY_MIB + 1)),
            bad,
        ),
        (
            "memory u64::MAX",
            alloc(|a| a.memory_mib = Some(u64::MAX)),
            bad,
        ),
        // Identifiers.
        (
            "short PCI address",
            alloc(|a| a.gpu = Some("7:0.0".into())),
            bad,
        ),
        (
            "upper-case PCI address",
            alloc(|a| a.gpu = Some("0000:0A:00.0".into())),
            bad,
        ),
        (
            "PCI address with a space",
            alloc(|a| a.gpu = Some(format!("{A100} "))),
            bad,
        ),
        (
            "path as PCI address",
            alloc(|a| a.gpu = Some("../../sys".into())),
            bad,
        ),
        (
            "unknown numa_policy",
            alloc(|a| a.numa_policy = Some("strict".into())),
            bad,
        ),
        // Idempotency keys (a header on REST, an option on D-Bus).
        (
            "key with a space",
            alloc(|a| a.key = Some("has space".into())),
            bad,
        ),
        (
            "key with a tab",
            alloc(|a| a.key = Some("tab\there".into())),
            bad,
        ),
        ("65-char key", alloc(|a| a.key = Some("k".repeat(65))), bad),
        ("empty key", alloc(|a| a.key = Some(String::new())), bad),
        // What the engine refuses keeps its code through both.
        (
            "unknown type",
            alloc(|a| a.slice_type = "no-such-type".into()),
            bad,
        ),
        (
            "count 9 of 7g.80gb on eight GPUs",
            alloc(|a| {
                a.slice_type = "7g.80gb".into();
                a.count = 9;
            }),
            "no_capacity",
        ),
        // Explicit slices.
        (
            "path as mdev parent",
            create(mig(), |c| {
                c.gpu = "../mtty".into();
                c.backend = "mdev";
                c.slice_type = "mtty-2".into();
            }),
            bad,
        ),
        (
            "short PCI address",
            create(mig(), |c| c.gpu = "0000:07:00".into()),
            bad,
        ),
        (
            "upper-case profile",
            create(mig(), |c| c.slice_type = "3G.40GB".into()),
            bad,
        ),
        (
            "start 8",
            create(mig(), |c| c.start = Some(MAX_MIG_START + 1)),
            bad,
        ),
        (
            "path as mdev type",
            create(mig(), |c| {
                c.backend = "mdev";
                c.slice_type = "../x".into();
            }),
            bad,
        ),
        (
            "vGPU type 0",
            create(mig(), |c| {
                c.backend = "nvidia-vfio";
                c.slice_type = "0".into();
            }),
            bad,
        ),
        (
            "200-char owner",
            create(mig(), |c| c.consumer = Some(long(200))),
            bad,
        ),
        (
            "empty owner",
            create(mig(), |c| c.consumer = Some(String::new())),
            bad,
        ),
        (
            "tab in owner's vm",
            create(mig(), |c| {
                c.consumer = Some("nova".into());
                c.vm = Some("a\tb".into());
            }),
            bad,
        ),
        // Layouts.
        (
            "200-char layout name",
            layout(json!({"name": long(200), "slices": []})),
            bad,
        ),
        (
            "ESC in layout name",
            layout(json!({"name": "a\u{1b}b", "slices": []})),
            bad,
        ),
        (
            "RLO override in layout name",
            layout(json!({"name": "a\u{202e}b", "slices": []})),
            bad,
        ),
        (
            "entry count 65",
            layout(entry("1g.10gb", MAX_COUNT + 1)),
            bad,
        ),
        ("empty entry type", layout(entry("", 1)), bad),
        ("65-char entry type", layout(entry(&long(65), 1)), bad),
        (
            "65 layouts",
            Request::Layouts(Value::Array(
                (0..=MAX_ITEMS)
                    .map(|i| json!({"name": format!("l{i}"), "slices": []}))
                    .collect(),
            )),
            bad,
        ),
        (
            "a name twice",
            Request::Layouts(json!([{"name": "a", "slices": []}, {"name": "a", "slices": []}])),
            bad,
        ),
        (
            "short PCI address in a selector",
            layout(json!({"name": "a", "selector": {"addresses": ["7:0.0"]}, "slices": []})),
            bad,
        ),
        (
            "upper-case PCI id in a selector",
            layout(json!({"name": "a", "selector": {"pci_ids": ["10DE:20B2"]}, "slices": []})),
            bad,
        ),
        (
            "GPU index 1024",
            layout(
                json!({"name": "a", "selector": {"indices": [MAX_GPU_INDEX + 1]}, "slices": []}),
            ),
            bad,
        ),
        (
            "200-char model in a selector",
            layout(json!({"name": "a", "selector": {"model": long(200)}, "slices": []})),
            bad,
        ),
        (
            "65 VFs",
            layout(json!({"name": "a", "slices": [],
                "amd": {"compute": "CPX", "memory": "NPS4", "vfs": MAX_ITEMS + 1}})),
            bad,
        ),
        (
            "unknown layout field",
            layout(json!({"name": "a", "slices": [], "colour": "red"})),
            bad,
        ),
        // Ids.
        (
            "upper-case allocation id",
            Request::Release(unknown_id.to_uppercase()),
            bad,
        ),
        (
            "allocation id without hyphens",
            Request::Release(unknown_id.replace('-', "")),
            bad,
        ),
        (
            "slice id that is no UUID",
            Request::DestroySlice("not-a-uuid".into()),
            bad,
        ),
        (
            "upper-case id to read",
            Request::AllocationJson(unknown_id.to_uppercase()),
            bad,
        ),
        (
            "unknown allocation",
            Request::Release(unknown_id.into()),
            "not_found",
        ),
        (
            "unknown slice",
            Request::DestroySlice(unknown_id.into()),
            "not_found",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_dbus_refuse_the_same_requests_with_the_same_code() {
    let Some(f) = fronts().await else { return };
    // Something a bad request could damage: an allocation.
    let held = f
        .rig
        .post(
            "/v1/allocations",
            json!({"consumer": "keep", "request": {"type": "3g.40gb", "gpu": A100}}),
        )
        .await;
    assert_eq!(held.status, 201, "{}", held.text());
    let before = f.rig.snapshot().await;

    let mut failures = Vec::new();
    for (what, req, code) in cases() {
        let (rest, rest_said) = through_rest(&f.rig, &req).await;
        let (bus, bus_said) = through_dbus(&f.client, &req).await;
        let want_bus = error_name_for_code(code);
        if rest.as_deref() != Some(code) || bus.as_deref() != Some(want_bus) {
            failures.push(format!(
                "{what}: REST {rest:?} ({rest_said}), D-Bus {bus:?} ({bus_said}); want {code} / {want_bus}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        f.rig.snapshot().await,
        before,
        "a refused request changed the host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_accepted_text_is_accepted_by_both() {
    let Some(f) = fronts().await else { return };
    let key = |c: char| c.to_string().repeat(MAX_TEXT_CHARS);
    let cases = [
        alloc(|a| {
            a.consumer = "é".repeat(MAX_TEXT_CHARS);
            a.vm = Some("v".repeat(MAX_TEXT_CHARS));
            a.key = Some(key('k'));
            a.count = 1;
            a.vcpus = Some(8);
            a.memory_mib = Some(4096);
        }),
        alloc(|a| {
            a.consumer = "n".repeat(MAX_TEXT_CHARS);
            a.key = Some(key('~'));
            a.gpu = Some(A100.into());
        }),
    ];
    for req in cases {
        let (rest, said) = through_rest(&f.rig, &req).await;
        assert_eq!(rest, None, "REST refused {req:?}: {said}");
        let (bus, allocation) = through_dbus(&f.client, &req).await;
        assert_eq!(bus, None, "D-Bus refused {req:?}: {allocation}");
        // The same consumer and key through the other front end is a retry of the same request.
        let rest_allocation: Value = serde_json::from_str(&said).unwrap();
        assert_eq!(rest_allocation["id"], allocation.as_str(), "{req:?}");
    }
    assert_eq!(f.rig.service.allocations().len(), 2);
}

/// Every schema object under a property (or component) named `name`, anywhere in the document.
fn named<'a>(doc: &'a Value, name: &str, out: &mut Vec<&'a Value>) {
    match doc {
        Value::Object(m) => {
            for (k, v) in m {
                if k == name {
                    out.push(v);
                }
                named(v, name, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| named(v, name, out)),
        _ => {}
    }
}

/// Every value of keyword `key` anywhere in the document.
fn keyword(doc: &Value, key: &str) -> Vec<u64> {
    let mut found = Vec::new();
    named(doc, key, &mut found);
    found.iter().filter_map(|v| v.as_u64()).collect()
}

#[test]
fn the_published_limits_are_the_shared_ones() {
    let doc: Value = serde_json::from_str(&api::rest::openapi_json()).unwrap();
    // Free text is bounded by the one text limit; the import's documents by their own.
    let text = keyword(&doc, "maxLength");
    let free_text = text.iter().filter(|n| **n == MAX_TEXT_CHARS as u64).count();
    assert!(free_text >= 8, "{text:?}");
    let lengths = [
        MAX_TEXT_CHARS,
        MAX_IMPORT_CONFIG_CHARS,
        MAX_IMPORT_CONFIG_NAME_CHARS,
        MAX_IMPORT_DEFINITION_CHARS,
    ];
    assert!(
        text.iter().all(|n| lengths.iter().any(|l| *n == *l as u64)),
        "maxLength {text:?}"
    );
    let items = keyword(&doc, "maxItems");
    let bounded = items.iter().filter(|n| **n == MAX_ITEMS as u64).count();
    assert!(bounded >= 5, "{items:?}");
    assert!(
        items
            .iter()
            .all(|n| *n == MAX_ITEMS as u64 || *n == MAX_IMPORT_DEFINITIONS as u64),
        "maxItems {items:?}"
    );
    let bounds: [(&str, u64); 6] = [
        ("count", MAX_COUNT.into()),
        ("vcpus", MAX_VCPUS.into()),
        ("memory_mib", MAX_MEMORY_MIB),
        ("start", MAX_MIG_START.into()),
        ("vfs", MAX_ITEMS as u64),
        ("GpuIndex", MAX_GPU_INDEX.into()),
    ];
    for (name, limit) in bounds {
        let mut schemas = Vec::new();
        named(&doc, name, &mut schemas);
        let maxima: Vec<u64> = schemas
            .iter()
            .filter_map(|s| s.get("maximum").and_then(Value::as_u64))
            .collect();
        assert!(!maxima.is_empty(), "{name} has no published maximum");
        assert!(
            maxima.iter().all(|m| *m == limit),
            "{name}: {maxima:?}, not {limit}"
        );
    }
}

#[test]
fn free_text_publishes_the_shared_pattern() {
    let doc: Value = serde_json::from_str(&api::rest::openapi_json()).unwrap();
    let mut patterns = Vec::new();
    named(&doc, "pattern", &mut patterns);
    let shared = agent::engine::limits::TEXT_PATTERN;
    let free_text = patterns
        .iter()
        .filter(|p| p.as_str() == Some(shared))
        .count();
    assert!(free_text >= 8, "{patterns:?}");
    // No field still publishes the pattern that let bidi overrides through.
    let old = r"^[^\u0000-\u001F\u007F-\u009F]+$";
    assert!(
        patterns.iter().all(|p| p.as_str() != Some(old)),
        "{patterns:?}"
    );
}
