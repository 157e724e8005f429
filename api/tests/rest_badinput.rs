//! Malformed requests: each gets a 4xx with the JSON error shape, and the state a client can see
//! (slices, allocations, host, layouts) is exactly the same afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rest_common;

use api::rest::RestOptions;
use rest_common::{A100, Rig};
use serde_json::json;

const JSON: (&str, &str) = ("content-type", "application/json");

/// One malformed request.
struct Case {
    what: String,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
}

fn json_case(what: &str, method: &'static str, path: &str, body: serde_json::Value) -> Case {
    raw_case(what, method, path, serde_json::to_vec(&body).unwrap())
}

fn raw_case(what: &str, method: &'static str, path: &str, body: Vec<u8>) -> Case {
    Case {
        what: what.to_owned(),
        method,
        path: path.to_owned(),
        headers: vec![(JSON.0, JSON.1.to_owned())],
        body: Some(body),
    }
}

fn bare(what: &str, method: &'static str, path: &str) -> Case {
    Case {
        what: what.to_owned(),
        method,
        path: path.to_owned(),
        headers: vec![],
        body: None,
    }
}

fn alloc(request: serde_json::Value) -> serde_json::Value {
    json!({"consumer": "nova", "request": request})
}

fn slice(kind: serde_json::Value) -> serde_json::Value {
    json!({"gpu": A100, "kind": kind})
}

fn layouts(l: serde_json::Value) -> serde_json::Value {
    json!({"layouts": [l]})
}

fn cases(existing_slice: &str, existing_alloc: &str) -> Vec<Case> {
    let mut c = Vec::new();
    let a = "/v1/allocations";
    let s = "/v1/slices";
    let l = "/v1/layouts";
    let p = "/v1/placement-score";

    // Unknown fields, at every level.
    c.push(json_case(
        "alloc: unknown top field",
        "POST",
        a,
        json!({"consumer": "c", "request": {"type": "1g.10gb"}, "extra": 1}),
    ));
    c.push(json_case(
        "alloc: unknown request field",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "colour": "red"})),
    ));
    c.push(json_case(
        "alloc: idempotency key in the body",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "idempotency_key": "k"})),
    ));
    for bad in [
        json!("nova-instance-1"),
        json!(42),
        json!("00000000-0000-0000-0000-000000000000"),
    ] {
        c.push(json_case(
            &format!("alloc: placement_consumer {bad}"),
            "POST",
            a,
            json!({"consumer": "c", "placement_consumer": bad, "request": {"type": "1g.10gb"}}),
        ));
    }
    c.push(json_case(
        "slice: unknown top field",
        "POST",
        s,
        json!({"gpu": A100, "kind": {"backend": "sriov-vf"}, "x": true}),
    ));
    c.push(json_case(
        "slice: unknown kind field",
        "POST",
        s,
        slice(json!({"backend": "mig", "profile": "1g.10gb", "slot": 1})),
    ));
    c.push(json_case(
        "slice: field next to a VF kind",
        "POST",
        s,
        slice(json!({"backend": "sriov-vf", "index": 3})),
    ));
    c.push(json_case(
        "slice: field next to a whole-GPU kind",
        "POST",
        s,
        slice(json!({"backend": "passthrough", "driver": "nvidia"})),
    ));
    c.push(json_case("slice: unknown owner field", "POST", s, json!({"gpu": A100, "kind": {"backend": "passthrough"}, "owner": {"consumer": "c", "tenant": "t"}})));
    c.push(json_case(
        "slice: engine form with spec",
        "POST",
        s,
        json!({"spec": {"gpu": A100, "kind": {"backend": "passthrough"}}}),
    ));
    c.push(json_case(
        "layouts: unknown top field",
        "PUT",
        l,
        json!({"layouts": [], "force": true}),
    ));
    c.push(json_case(
        "layouts: unknown layout field",
        "PUT",
        l,
        layouts(json!({"name": "a", "slices": [], "priority": 1})),
    ));
    c.push(json_case(
        "layouts: unknown selector field",
        "PUT",
        l,
        layouts(json!({"name": "a", "selector": {"uuid": "x"}, "slices": []})),
    ));
    c.push(json_case(
        "layouts: unknown entry field",
        "PUT",
        l,
        layouts(json!({"name": "a", "slices": [{"type": "1g.10gb", "count": 1, "start": 0}]})),
    ));
    c.push(json_case(
        "score: unknown field",
        "POST",
        p,
        json!({"type": "1g.10gb", "consumer": "c"}),
    ));

    // Missing fields.
    c.push(json_case(
        "alloc: no consumer",
        "POST",
        a,
        json!({"request": {"type": "1g.10gb"}}),
    ));
    c.push(json_case(
        "alloc: no request",
        "POST",
        a,
        json!({"consumer": "c"}),
    ));
    c.push(json_case(
        "alloc: no type",
        "POST",
        a,
        alloc(json!({"count": 1})),
    ));
    c.push(json_case(
        "slice: no gpu",
        "POST",
        s,
        json!({"kind": {"backend": "passthrough"}}),
    ));
    c.push(json_case("slice: no kind", "POST", s, json!({"gpu": A100})));
    c.push(json_case(
        "slice: no backend",
        "POST",
        s,
        slice(json!({"profile": "1g.10gb"})),
    ));
    c.push(json_case(
        "slice: mig without profile",
        "POST",
        s,
        slice(json!({"backend": "mig"})),
    ));
    c.push(json_case("layouts: no layouts", "PUT", l, json!({})));
    c.push(json_case(
        "layouts: no name",
        "PUT",
        l,
        layouts(json!({"slices": []})),
    ));

    // Wrong types.
    for (what, v) in [
        ("number", json!(1)),
        ("null", json!(null)),
        ("array", json!(["c"])),
        ("object", json!({"c": 1})),
        ("bool", json!(true)),
    ] {
        c.push(json_case(
            &format!("alloc: consumer is a {what}"),
            "POST",
            a,
            json!({"consumer": v, "request": {"type": "1g.10gb"}}),
        ));
    }
    for (what, v) in [
        ("string", json!("2")),
        ("negative", json!(-1)),
        ("fraction", json!(1.5)),
        ("bool", json!(true)),
        ("huge", json!(1u64 << 40)),
        ("null", json!(null)),
    ] {
        c.push(json_case(
            &format!("alloc: count is {what}"),
            "POST",
            a,
            alloc(json!({"type": "1g.10gb", "count": v})),
        ));
    }
    c.push(json_case(
        "alloc: request is a string",
        "POST",
        a,
        json!({"consumer": "c", "request": "1g.10gb"}),
    ));
    c.push(json_case(
        "alloc: type is a number",
        "POST",
        a,
        alloc(json!({"type": 5})),
    ));
    c.push(json_case(
        "alloc: gpu is a number",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "gpu": 7})),
    ));
    c.push(json_case(
        "alloc: vm is a number",
        "POST",
        a,
        json!({"consumer": "c", "vm": 3, "request": {"type": "1g.10gb"}}),
    ));
    c.push(json_case(
        "alloc: numa_policy unknown",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "numa_policy": "strict"})),
    ));
    c.push(json_case(
        "alloc: vcpus is a string",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "vcpus": "4"})),
    ));
    c.push(json_case(
        "slice: kind is a string",
        "POST",
        s,
        json!({"gpu": A100, "kind": "mig"}),
    ));
    c.push(json_case(
        "slice: backend is a number",
        "POST",
        s,
        slice(json!({"backend": 3})),
    ));
    c.push(json_case(
        "slice: unknown backend",
        "POST",
        s,
        slice(json!({"backend": "warp"})),
    ));
    c.push(json_case(
        "slice: start is a string",
        "POST",
        s,
        slice(json!({"backend": "mig", "profile": "1g.10gb", "start": "0"})),
    ));
    c.push(json_case(
        "slice: vgpu_type is a string",
        "POST",
        s,
        slice(json!({"backend": "nvidia-vfio", "vgpu_type": "x"})),
    ));
    c.push(json_case(
        "slice: gpu is an array",
        "POST",
        s,
        json!({"gpu": [A100], "kind": {"backend": "passthrough"}}),
    ));
    c.push(json_case(
        "layouts: layouts is an object",
        "PUT",
        l,
        json!({"layouts": {}}),
    ));
    c.push(json_case(
        "layouts: slices is a string",
        "PUT",
        l,
        layouts(json!({"name": "a", "slices": "1g.10gb"})),
    ));
    c.push(json_case(
        "layouts: count is a string",
        "PUT",
        l,
        layouts(json!({"name": "a", "slices": [{"type": "1g.10gb", "count": "7"}]})),
    ));
    c.push(json_case(
        "layouts: indices are strings",
        "PUT",
        l,
        layouts(json!({"name": "a", "selector": {"indices": ["0"]}, "slices": []})),
    ));
    c.push(json_case(
        "score: count is a string",
        "POST",
        p,
        json!({"type": "1g.10gb", "count": "1"}),
    ));

    // Out of range.
    for n in [0u64, 65, 4_294_967_296] {
        c.push(json_case(
            &format!("alloc: count {n}"),
            "POST",
            a,
            alloc(json!({"type": "1g.10gb", "count": n})),
        ));
    }
    c.push(json_case(
        "alloc: vcpus 0",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "vcpus": 0})),
    ));
    c.push(json_case(
        "alloc: vcpus 5000",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "vcpus": 5000})),
    ));
    c.push(json_case(
        "alloc: memory 0",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "memory_mib": 0})),
    ));
    c.push(json_case(
        "alloc: memory 2^40",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "memory_mib": 1u64 << 40})),
    ));
    for start in [8, 99] {
        c.push(json_case(
            &format!("slice: start {start}"),
            "POST",
            s,
            slice(json!({"backend": "mig", "profile": "1g.10gb", "start": start})),
        ));
    }
    c.push(json_case(
        "slice: vgpu_type 0",
        "POST",
        s,
        slice(json!({"backend": "nvidia-vfio", "vgpu_type": 0})),
    ));
    c.push(json_case(
        "layouts: count 65",
        "PUT",
        l,
        layouts(json!({"name": "a", "slices": [{"type": "1g.10gb", "count": 65}]})),
    ));
    c.push(json_case(
        "layouts: index 1024",
        "PUT",
        l,
        layouts(json!({"name": "a", "selector": {"indices": [1024]}, "slices": []})),
    ));
    let many: Vec<_> = (0..65)
        .map(|i| json!({"name": format!("l{i}"), "slices": []}))
        .collect();
    c.push(json_case(
        "layouts: 65 layouts",
        "PUT",
        l,
        json!({"layouts": many}),
    ));
    c.push(json_case(
        "layouts: same name twice",
        "PUT",
        l,
        json!({"layouts": [{"name": "a", "slices": []}, {"name": "a", "slices": []}]}),
    ));
    c.push(json_case(
        "score: count 0",
        "POST",
        p,
        json!({"type": "1g.10gb", "count": 0}),
    ));

    // Bad text: empty, too long, control characters.
    c.push(json_case(
        "alloc: empty consumer",
        "POST",
        a,
        json!({"consumer": "", "request": {"type": "1g.10gb"}}),
    ));
    c.push(json_case(
        "alloc: 65-character consumer",
        "POST",
        a,
        json!({"consumer": "c".repeat(65), "request": {"type": "1g.10gb"}}),
    ));
    c.push(json_case(
        "alloc: newline in consumer",
        "POST",
        a,
        json!({"consumer": "a\nb", "request": {"type": "1g.10gb"}}),
    ));
    c.push(json_case(
        "alloc: NUL in vm",
        "POST",
        a,
        json!({"consumer": "c", "vm": "a\u{0}b", "request": {"type": "1g.10gb"}}),
    ));
    c.push(json_case(
        "alloc: C1 control in type",
        "POST",
        a,
        alloc(json!({"type": "1g\u{85}10gb"})),
    ));
    c.push(json_case(
        "alloc: empty type",
        "POST",
        a,
        alloc(json!({"type": ""})),
    ));
    c.push(json_case(
        "layouts: empty name",
        "PUT",
        l,
        layouts(json!({"name": "", "slices": []})),
    ));
    c.push(json_case(
        "layouts: escape in model",
        "PUT",
        l,
        layouts(json!({"name": "a", "selector": {"model": "A100\u{1b}[2J"}, "slices": []})),
    ));

    // Path traversal and `..` in ids, in paths and in bodies.
    for path in [
        "/v1/slices/..",
        "/v1/slices/..%2F..%2Fetc%2Fpasswd",
        "/v1/slices/%2e%2e",
        "/v1/allocations/..%2Fslices",
        "/v1/gpus/..%2F0000:07:00.0",
        "/v1/gpus/0000:07:00.0%2F..%2F..",
        "/v1/gpus/..",
        "/v1/operations/..%2F..",
        "/v1/slices/%00",
        "/v1/gpus/0000:07:00.0%00",
    ] {
        c.push(bare(&format!("GET {path}"), "GET", path));
    }
    for path in [
        "/v1/slices/..%2F..%2Fsys",
        "/v1/allocations/%2e%2e%2f%2e%2e",
    ] {
        c.push(bare(&format!("DELETE {path}"), "DELETE", path));
    }
    c.push(json_case(
        "slice: gpu is a path",
        "POST",
        s,
        json!({"gpu": "../../sys/bus/pci", "kind": {"backend": "passthrough"}}),
    ));
    c.push(json_case(
        "slice: mdev type ..",
        "POST",
        s,
        slice(json!({"backend": "mdev", "type_id": ".."})),
    ));
    c.push(json_case(
        "slice: mdev type with /",
        "POST",
        s,
        slice(json!({"backend": "mdev", "type_id": "../../remove"})),
    ));
    c.push(json_case(
        "slice: mdev type .",
        "POST",
        s,
        slice(json!({"backend": "mdev", "type_id": "."})),
    ));
    c.push(json_case(
        "slice: MIG profile with /",
        "POST",
        s,
        slice(json!({"backend": "mig", "profile": "../1g.10gb"})),
    ));
    c.push(json_case(
        "alloc: gpu is a path",
        "POST",
        a,
        alloc(json!({"type": "1g.10gb", "gpu": "../0000:07:00.0"})),
    ));
    c.push(json_case("layouts: address is a path", "PUT", l, layouts(json!({"name": "a", "selector": {"addresses": ["/sys/bus/pci/devices/0000:07:00.0"]}, "slices": []}))));

    // Non-canonical ids.
    let upper = existing_slice.to_uppercase();
    let simple = existing_slice.replace('-', "");
    for id in [
        upper.as_str(),
        simple.as_str(),
        &format!("{{{existing_slice}}}"),
        &format!("urn:uuid:{existing_slice}"),
        &format!("{existing_slice}%20"),
        &format!("%20{existing_slice}"),
        &format!("{existing_slice}0"),
        // (The nil UUID is well formed and names nothing: 404, as the document says.)
        "not-a-uuid",
    ] {
        c.push(bare(
            &format!("GET slice {id}"),
            "GET",
            &format!("/v1/slices/{id}"),
        ));
        c.push(bare(
            &format!("DELETE slice {id}"),
            "DELETE",
            &format!("/v1/slices/{id}"),
        ));
    }
    for id in [
        existing_alloc.to_uppercase(),
        existing_alloc.replace('-', ""),
    ] {
        c.push(bare(
            &format!("GET allocation {id}"),
            "GET",
            &format!("/v1/allocations/{id}"),
        ));
        c.push(bare(
            &format!("DELETE allocation {id}"),
            "DELETE",
            &format!("/v1/allocations/{id}"),
        ));
    }
    c.push(bare(
        "operation upper case",
        "GET",
        "/v1/operations/6F1C1A52-8D3E-4B9A-9D7E-1F2A3B4C5D6E",
    ));
    for gpu in [
        "0000:07:00.00",
        "0000:7:00.0",
        "0000:07:00.0.",
        "0000:07:00.8",
        "10000:07:00.0",
    ] {
        c.push(bare(
            &format!("GET gpu {gpu}"),
            "GET",
            &format!("/v1/gpus/{gpu}"),
        ));
    }
    c.push(json_case(
        "slice: upper-case gpu",
        "POST",
        s,
        json!({"gpu": "0000:0F:00.0", "kind": {"backend": "passthrough"}}),
    ));
    c.push(json_case(
        "slice: short gpu",
        "POST",
        s,
        json!({"gpu": "7:0.0", "kind": {"backend": "passthrough"}}),
    ));
    c.push(json_case(
        "slice: MIG profile upper case",
        "POST",
        s,
        slice(json!({"backend": "mig", "profile": "1G.10GB"})),
    ));
    c.push(json_case(
        "slice: MIG profile with prefix",
        "POST",
        s,
        slice(json!({"backend": "mig", "profile": "MIG 1g.10gb"})),
    ));
    c.push(json_case(
        "layouts: pci id upper case",
        "PUT",
        l,
        layouts(json!({"name": "a", "selector": {"pci_ids": ["10DE:20B2"]}, "slices": []})),
    ));

    // Huge bodies and deep nesting.
    c.push(json_case(
        "alloc: 2 MiB consumer",
        "POST",
        a,
        json!({"consumer": "c".repeat(2 << 20), "request": {"type": "1g.10gb"}}),
    ));
    c.push(raw_case(
        "layouts: 2 MiB of spaces",
        "PUT",
        l,
        vec![b' '; 2 << 20],
    ));
    c.push(raw_case(
        "alloc: nested 10000 deep",
        "POST",
        a,
        format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
    ));
    c.push(raw_case(
        "alloc: number 1e400",
        "POST",
        a,
        br#"{"consumer":"c","request":{"type":"1g.10gb","count":1e400}}"#.to_vec(),
    ));

    // Invalid UTF-8 and bad JSON.
    c.push(raw_case(
        "alloc: invalid UTF-8 in a string",
        "POST",
        a,
        b"{\"consumer\":\"\xff\xfe\",\"request\":{\"type\":\"1g.10gb\"}}".to_vec(),
    ));
    c.push(raw_case(
        "slice: lone surrogate escape",
        "POST",
        s,
        br#"{"gpu":"\ud800","kind":{"backend":"passthrough"}}"#.to_vec(),
    ));
    c.push(raw_case(
        "alloc: overlong UTF-8",
        "POST",
        a,
        b"{\"consumer\":\"\xc0\xaf\",\"request\":{\"type\":\"vf\"}}".to_vec(),
    ));
    for (what, body) in [
        ("empty", ""),
        ("truncated", r#"{"consumer": "c", "request": {"type""#),
        (
            "trailing comma",
            r#"{"consumer": "c", "request": {"type": "vf"},}"#,
        ),
        ("single quotes", r#"{'consumer': 'c'}"#),
        (
            "NaN",
            r#"{"consumer": "c", "request": {"type": "vf", "count": NaN}}"#,
        ),
        ("null", "null"),
        ("array", "[]"),
        (
            "two documents",
            r#"{"consumer":"c","request":{"type":"vf"}} {}"#,
        ),
        (
            "duplicate field",
            r#"{"consumer":"c","consumer":"d","request":{"type":"vf"}}"#,
        ),
        (
            "comment",
            r#"{"consumer":"c", /* x */ "request":{"type":"vf"}}"#,
        ),
    ] {
        c.push(raw_case(
            &format!("alloc: {what}"),
            "POST",
            a,
            body.as_bytes().to_vec(),
        ));
    }
    c.push(Case {
        what: "GET slice with invalid UTF-8 in the path".into(),
        method: "GET",
        path: "/v1/slices/%ff%fe".into(),
        headers: vec![],
        body: None,
    });

    // Wrong content types.
    let body = serde_json::to_vec(&alloc(json!({"type": "1g.10gb"}))).unwrap();
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/xml"),
        Some("text/json"),
    ] {
        c.push(Case {
            what: format!("alloc: content type {ct:?}"),
            method: "POST",
            path: a.to_owned(),
            headers: ct
                .map(|v| vec![("content-type", v.to_owned())])
                .unwrap_or_default(),
            body: Some(body.clone()),
        });
    }
    c.push(Case {
        what: "layouts: text/plain".into(),
        method: "PUT",
        path: l.into(),
        headers: vec![("content-type", "text/plain".into())],
        body: Some(br#"{"layouts": []}"#.to_vec()),
    });

    // Bad headers.
    for key in ["", "has space", &"k".repeat(65), "tab\there"] {
        c.push(Case {
            what: format!("alloc: Idempotency-Key {key:?}"),
            method: "POST",
            path: a.into(),
            headers: vec![
                (JSON.0, JSON.1.to_owned()),
                ("idempotency-key", key.to_owned()),
            ],
            body: Some(body.clone()),
        });
    }
    c.push(Case {
        what: "layouts: stale If-Match".into(),
        method: "PUT",
        path: l.into(),
        headers: vec![(JSON.0, JSON.1.into()), ("if-match", "\"stale\"".into())],
        body: Some(br#"{"layouts": []}"#.to_vec()),
    });

    // Unknown routes and methods.
    c.push(bare("PUT /v1/slices", "PUT", s));
    c.push(bare("DELETE /v1/slices", "DELETE", s));
    c.push(bare("POST /v1/host", "POST", "/v1/host"));
    c.push(bare("DELETE /v1/layouts", "DELETE", l));
    c.push(bare(
        "GET /v1/slices/../../etc/passwd",
        "GET",
        "/v1/slices/../../etc/passwd",
    ));
    c.push(bare("GET /v1/slices/x/y", "GET", "/v1/slices/x/y"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_json_4xx_and_change_nothing() {
    let rig = Rig::start_with(
        "dgx-a100",
        RestOptions {
            max_body_bytes: 1 << 20,
        },
    )
    .await;
    // Something to damage: a free slice, an allocation and a layout.
    let made = rig
        .post(
            "/v1/slices",
            json!({"gpu": "0000:0f:00.0", "kind": {"backend": "mig", "profile": "1g.10gb"}}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let slice_id = made.json()["id"].as_str().unwrap().to_owned();
    let held = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "keep", "request": {"type": "3g.40gb", "gpu": A100}}),
        )
        .await;
    assert_eq!(held.status, 201, "{}", held.text());
    let alloc_id = held.json()["id"].as_str().unwrap().to_owned();
    let before = rig.snapshot().await;

    let cases = cases(&slice_id, &alloc_id);
    assert!(
        cases.len() >= 100,
        "only {} malformed requests",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let headers: Vec<(&str, &str)> =
            case.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let reply = rig
            .call(case.method, &case.path, &headers, case.body.clone())
            .await;
        let shape_ok = serde_json::from_slice::<serde_json::Value>(&reply.body)
            .ok()
            .and_then(|v| {
                let o = v.as_object()?.clone();
                (o.len() == 3
                    && o["code"].is_string()
                    && o["message"].is_string()
                    && o["details"].is_object())
                .then_some(())
            })
            .is_some();
        if !reply.status.is_client_error() || !shape_ok {
            failures.push(format!(
                "{}: {} {}",
                case.what,
                reply.status,
                reply.text().chars().take(200).collect::<String>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    let after = rig.snapshot().await;
    assert_eq!(before, after, "a malformed request changed the state");
    println!(
        "{} malformed requests refused with a JSON 4xx; state unchanged",
        cases.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejections_carry_the_documented_codes() {
    let rig = Rig::start_with(
        "dgx-a100",
        RestOptions {
            max_body_bytes: 4096,
        },
    )
    .await;
    let big = rig
        .call("POST", "/v1/allocations", &[JSON], Some(vec![b' '; 8192]))
        .await;
    assert_eq!(big.status, 413);
    assert_eq!(big.error_code(), "payload_too_large");
    assert_eq!(big.json()["details"]["limit_bytes"], 4096);
    let text = rig
        .call(
            "POST",
            "/v1/allocations",
            &[("content-type", "text/plain")],
            Some(b"{}".to_vec()),
        )
        .await;
    assert_eq!(text.status, 415);
    assert_eq!(text.error_code(), "unsupported_media_type");
    let syntax = rig
        .call("POST", "/v1/allocations", &[JSON], Some(b"{".to_vec()))
        .await;
    assert_eq!(syntax.status, 400);
    assert_eq!(syntax.error_code(), "bad_json");
    let unknown = rig
        .post(
            "/v1/allocations",
            json!({"consumer": "c", "request": {"type": "vf"}, "x": 1}),
        )
        .await;
    assert_eq!(unknown.status, 422);
    assert_eq!(unknown.error_code(), "invalid_request");
    assert!(
        unknown.json()["message"]
            .as_str()
            .unwrap()
            .contains("unknown field"),
        "{}",
        unknown.text()
    );
}
