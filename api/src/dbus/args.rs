//! The D-Bus methods' arguments, turned into the REST API's wire types and checked by the same
//! code ([`crate::wire`]), so both front ends accept and refuse exactly the same requests with
//! the same machine code. What is D-Bus's own is only the mapping: positional arguments and an
//! `a{sv}` of options (each of a fixed D-Bus type) onto the wire type's fields.

use std::collections::HashMap;

use agent::engine;
use zbus::OwnedVariant;

use super::error::DbusError;
use crate::wire::IdempotencyKey;
use crate::wire::import::ImportRequest;
use crate::wire::layouts::{Layout, LayoutsRequest};
use crate::wire::slices::{
    AllocationRequest, CreateSliceRequest, NumaPolicy, Owner, SliceKind, SliceRequest,
};

/// The largest layouts document `ApplyLayouts` accepts, bytes (REST's default body limit).
pub const MAX_LAYOUTS_JSON: usize = 1 << 20;

/// An `a{sv}` options argument: each key taken once, with its type checked; keys left over are
/// refused, so a misspelt option is an error rather than silently ignored.
pub(super) struct Options(pub(super) HashMap<String, OwnedVariant>);

impl Options {
    pub(super) fn string(&mut self, key: &str) -> Result<Option<String>, DbusError> {
        self.0
            .remove(key)
            .map(|v| {
                String::try_from(v)
                    .map_err(|_| DbusError::invalid(format!("option {key:?} must be a string (s)")))
            })
            .transpose()
    }

    pub(super) fn u32(&mut self, key: &str) -> Result<Option<u32>, DbusError> {
        self.0
            .remove(key)
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    DbusError::invalid(format!("option {key:?} must be an unsigned integer (u)"))
                })
            })
            .transpose()
    }

    pub(super) fn u64(&mut self, key: &str) -> Result<Option<u64>, DbusError> {
        self.0
            .remove(key)
            .map(|v| {
                // A small number typed by hand arrives as `u`; accept it as well as `t`.
                let value = v.clone();
                u64::try_from(v)
                    .or_else(|_| u32::try_from(value).map(u64::from))
                    .map_err(|_| {
                        DbusError::invalid(format!(
                            "option {key:?} must be an unsigned integer (t or u)"
                        ))
                    })
            })
            .transpose()
    }

    pub(super) fn finish(self, allowed: &str) -> Result<(), DbusError> {
        let mut unknown: Vec<&String> = self.0.keys().collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort();
        let shown: Vec<String> = unknown
            .iter()
            .take(4)
            .map(|k| format!("{:?}", k.chars().take(64).collect::<String>()))
            .collect();
        Err(DbusError::invalid(format!(
            "unknown option(s) {}; allowed: {allowed}",
            shown.join(", ")
        )))
    }
}

/// `CreateSlice`: the device, the backend and its type as positional arguments; `start`,
/// `consumer` and `vm` as options. Checked as `POST /v1/slices` checks its body.
pub fn create_request(
    gpu: &str,
    backend: &str,
    slice_type: &str,
    options: HashMap<String, OwnedVariant>,
) -> Result<engine::CreateSlice, DbusError> {
    let mut options = Options(options);
    let start = options.u32("start")?;
    let consumer = options.string("consumer")?;
    let vm = options.string("vm")?;
    options.finish("start, consumer, vm")?;
    let request = CreateSliceRequest {
        gpu: gpu.to_owned(),
        kind: slice_kind(backend, slice_type, start)?,
        owner: owner(consumer, vm)?,
    };
    Ok(request.to_engine()?)
}

/// The wire kind a backend name and a type string stand for: the names are the `backend` tags
/// of [`SliceKind`], the type is its one parameter.
fn slice_kind(backend: &str, slice_type: &str, start: Option<u32>) -> Result<SliceKind, DbusError> {
    let takes_start = matches!(backend, "mig" | "nvidia-vfio");
    if start.is_some() && !takes_start {
        return Err(DbusError::invalid(
            "option \"start\" is for MIG slices and MIG-backed vGPU types only",
        ));
    }
    let typed = |what: &str| -> Result<String, DbusError> {
        if slice_type.is_empty() {
            return Err(DbusError::invalid(format!(
                "backend {backend:?} needs a type ({what})"
            )));
        }
        Ok(slice_type.to_owned())
    };
    let untyped = || -> Result<(), DbusError> {
        if slice_type.is_empty() {
            return Ok(());
        }
        Err(DbusError::invalid(format!(
            "backend {backend:?} takes no type; pass an empty string"
        )))
    };
    Ok(match backend {
        "mdev" => SliceKind::Mdev {
            type_id: typed("an mdev type id such as nvidia-222")?,
        },
        "nvidia-vfio" => SliceKind::NvidiaVfio {
            // JSON carries the id as a number; here it is text, in its one decimal spelling.
            vgpu_type: crate::wire::canonical("type", &typed("a vGPU type id")?, "a vGPU type id")?,
            start,
        },
        "mig" => SliceKind::Mig {
            profile: typed("a MIG profile such as 3g.40gb")?,
            start,
        },
        "sriov-vf" => {
            untyped()?;
            SliceKind::SriovVf {}
        }
        "passthrough" => {
            untyped()?;
            SliceKind::Passthrough {}
        }
        other => {
            let shown: String = other.chars().take(64).collect();
            return Err(DbusError::invalid(format!(
                "unknown backend {shown:?}: use mdev, nvidia-vfio, sriov-vf, mig or passthrough"
            )));
        }
    })
}

/// The owner of a new slice: a VM only ever with its consumer, as in REST's `owner` object.
fn owner(consumer: Option<String>, vm: Option<String>) -> Result<Option<Owner>, DbusError> {
    match (consumer, vm) {
        (Some(consumer), vm) => Ok(Some(Owner { consumer, vm })),
        (None, None) => Ok(None),
        (None, Some(_)) => Err(DbusError::invalid(
            "option \"vm\" needs option \"consumer\" too",
        )),
    }
}

/// `Allocate`: consumer, type and count as positional arguments, the rest as options. Checked as
/// `POST /v1/allocations` checks its body and `Idempotency-Key` header.
pub fn allocation_request(
    consumer: String,
    slice_type: String,
    count: u32,
    options: HashMap<String, OwnedVariant>,
) -> Result<engine::AllocationRequest, DbusError> {
    let mut options = Options(options);
    let vm = options.string("vm")?;
    let gpu = options.string("gpu")?;
    let idempotency_key = options
        .string("idempotency_key")?
        .map(|k| IdempotencyKey::parse("idempotency_key", &k))
        .transpose()?;
    let numa_policy = options
        .string("numa_policy")?
        .map(|p| parse_numa_policy(&p))
        .transpose()?;
    let vcpus = options.u32("vcpus")?;
    let memory_mib = options.u64("memory_mib")?;
    let placement_consumer = options.string("placement_consumer")?;
    options
        .finish("vm, gpu, idempotency_key, numa_policy, vcpus, memory_mib, placement_consumer")?;
    let request = AllocationRequest {
        consumer,
        vm,
        placement_consumer,
        request: SliceRequest {
            slice_type,
            count,
            gpu,
            numa_policy,
            vcpus,
            memory_mib,
        },
    };
    Ok(request.to_engine(idempotency_key)?)
}

/// A NUMA policy by its JSON name, parsed by the wire type itself so D-Bus and REST accept the
/// same words.
fn parse_numa_policy(text: &str) -> Result<NumaPolicy, DbusError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
        let shown: String = text.chars().take(64).collect();
        DbusError::invalid(format!(
            "unknown numa_policy {shown:?}: use required, preferred or none"
        ))
    })
}

/// `ApplyLayouts`: a JSON array of layouts, the `layouts` member of `PUT /v1/layouts`'s body,
/// checked by the same code.
pub fn layouts(text: &str) -> Result<Vec<engine::Layout>, DbusError> {
    if text.len() > MAX_LAYOUTS_JSON {
        return Err(DbusError::invalid(format!(
            "the layouts document is {} bytes; at most {MAX_LAYOUTS_JSON} are accepted",
            text.len()
        )));
    }
    let layouts: Vec<Layout> = serde_json::from_str(text)
        .map_err(|e| DbusError::invalid(format!("invalid layouts document: {e}")))?;
    Ok(LayoutsRequest { layouts }.to_engine()?)
}

/// `ImportLayouts`: the JSON body of `POST /v1/layouts/import`, parsed into the same wire type
/// (its checks run in [`ImportRequest::to_engine`], as for REST).
pub fn import_request(text: &str) -> Result<ImportRequest, DbusError> {
    if text.len() > MAX_LAYOUTS_JSON {
        return Err(DbusError::invalid(format!(
            "the import request is {} bytes; at most {MAX_LAYOUTS_JSON} are accepted",
            text.len()
        )));
    }
    serde_json::from_str(text)
        .map_err(|e| DbusError::invalid(format!("invalid import request: {e}")))
}

/// A slice id: a canonical UUID, as in REST's paths.
pub fn slice_id(text: &str) -> Result<engine::SliceId, DbusError> {
    Ok(crate::wire::slices::slice_id(text)?)
}

/// An allocation id: a canonical UUID, as in REST's paths.
pub fn allocation_id(text: &str) -> Result<engine::AllocationId, DbusError> {
    Ok(crate::wire::slices::allocation_id(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent::engine::{DeviceRef, NumaPolicy, SliceKind};
    use zbus::Variant;

    fn opts(pairs: &[(&str, Variant<'static>)]) -> HashMap<String, OwnedVariant> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OwnedVariant::try_from(v.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn create_requests_name_a_gpu_or_a_virtual_mdev_parent() {
        let on_parent = create_request("mtty", "mdev", "mtty-2", opts(&[])).unwrap();
        assert_eq!(
            on_parent.spec.gpu,
            DeviceRef::MdevParent("mtty".parse().unwrap())
        );
        let mig_vgpu = create_request(
            "0000:07:00.0",
            "nvidia-vfio",
            "1414",
            opts(&[("start", Variant::from(2u32))]),
        )
        .unwrap();
        assert_eq!(mig_vgpu.spec.kind.start(), Some(2));
        let on_gpu = create_request("0000:07:00.0", "sriov-vf", "", opts(&[])).unwrap();
        assert_eq!(on_gpu.spec.gpu.pci(), Some("0000:07:00.0".parse().unwrap()));
        for bad in ["../mtty", "mt ty", ""] {
            let err = create_request(bad, "mdev", "mtty-2", opts(&[])).unwrap_err();
            assert!(
                format!("{err:?}").contains("mdev parent"),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn create_requests_are_typed_and_checked() {
        let req = create_request(
            "0000:07:00.0",
            "mig",
            "3g.40gb",
            opts(&[
                ("start", Variant::from(4u32)),
                ("consumer", Variant::from("nova")),
            ]),
        )
        .unwrap();
        assert_eq!(
            req.spec.kind,
            SliceKind::Mig {
                profile: "3g.40gb".parse().unwrap(),
                start: Some(4)
            }
        );
        assert_eq!(req.owner.unwrap().consumer, "nova");
        let vf = create_request("0000:07:00.0", "sriov-vf", "", HashMap::new()).unwrap();
        assert_eq!(vf.spec.kind, SliceKind::SriovVf);
        let bad = [
            create_request("0000:07:00", "mig", "3g.40gb", HashMap::new()),
            create_request("0000:07:00.0", "warp", "x", HashMap::new()),
            create_request("0000:07:00.0", "mdev", "", HashMap::new()),
            create_request("0000:07:00.0", "mdev", "../x", HashMap::new()),
            create_request("0000:07:00.0", "sriov-vf", "3g.40gb", HashMap::new()),
            create_request(
                "0000:07:00.0",
                "mdev",
                "nvidia-222",
                opts(&[("start", Variant::from(1u32))]),
            ),
            create_request(
                "0000:07:00.0",
                "mig",
                "3g.40gb",
                opts(&[("start", Variant::from("4"))]),
            ),
            create_request(
                "0000:07:00.0",
                "mig",
                "3g.40gb",
                opts(&[("vm", Variant::from("vm1"))]),
            ),
            create_request(
                "0000:07:00.0",
                "mig",
                "3g.40gb",
                opts(&[("stat", Variant::from(1u32))]),
            ),
        ];
        for (i, r) in bad.into_iter().enumerate() {
            let e = r.unwrap_err();
            assert_eq!(
                e.error_name(),
                "io.vgpud.Agent1.Error.InvalidRequest",
                "case {i}: {e}"
            );
        }
    }

    #[test]
    fn allocation_requests_take_known_options_only() {
        let req = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            2,
            opts(&[
                ("vm", Variant::from("vm-1")),
                ("gpu", Variant::from("0000:07:00.0")),
                ("idempotency_key", Variant::from("k")),
                ("numa_policy", Variant::from("required")),
                ("vcpus", Variant::from(8u32)),
                ("memory_mib", Variant::from(4096u32)),
                (
                    "placement_consumer",
                    Variant::from("6F3B9A3E-2C4D-4E5F-8A9B-0C1D2E3F4A5B"),
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            req.placement_consumer.map(|c| c.to_string()).as_deref(),
            Some("6f3b9a3e-2c4d-4e5f-8a9b-0c1d2e3f4a5b")
        );
        assert_eq!(req.vm.as_deref(), Some("vm-1"));
        assert_eq!(req.request.count, 2);
        assert_eq!(req.request.gpu, Some("0000:07:00.0".parse().unwrap()));
        assert_eq!(req.request.numa_policy, Some(NumaPolicy::Required));
        assert_eq!(req.request.vcpus, Some(8));
        assert_eq!(req.request.memory_mib, Some(4096));
        let e = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            1,
            opts(&[("numa_policy", Variant::from("strict"))]),
        )
        .unwrap_err();
        assert!(e.message().contains("numa_policy"), "{e}");
        for bad in [
            "vm-1",
            "6f3b9a3e2c4d4e5f8a9b0c1d2e3f4a5b",
            "00000000-0000-0000-0000-000000000000",
        ] {
            let e = allocation_request(
                "nova".into(),
                "1g.10gb".into(),
                1,
                opts(&[("placement_consumer", Variant::from(bad))]),
            )
            .unwrap_err();
            assert_eq!(e.error_name(), "io.vgpud.Agent1.Error.InvalidRequest");
            assert!(e.message().contains("placement_consumer"), "{bad}: {e}");
        }
        let e = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            1,
            opts(&[("numa", Variant::from(1u32))]),
        )
        .unwrap_err();
        assert!(e.message().contains("\"numa\""), "{e}");
        let e = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            1,
            opts(&[("gpu", Variant::from("../../sys"))]),
        )
        .unwrap_err();
        assert_eq!(e.error_name(), "io.vgpud.Agent1.Error.InvalidRequest");
    }
}
