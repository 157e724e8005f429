//! [`EngineError`]: every way an engine operation fails, each with a stable machine code.

use std::time::Duration;

use ids::PciAddress;

/// A boxed underlying error.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an engine operation failed. [`EngineError::code`] is stable: front ends map it to HTTP
/// statuses and D-Bus error names.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Nothing is free to satisfy the request.
    #[error("no capacity: {0}")]
    NoCapacity(String),
    /// The slice or device is in use (a VM holds it, processes run on it).
    #[error("busy: {0}")]
    Busy(String),
    /// The GPU or host cannot do this.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The request contradicts the current state (allocated slice, occupied placement, …).
    #[error("conflict: {0}")]
    Conflict(String),
    /// No such slice, allocation or GPU.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request is malformed or names something the host does not offer.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The kernel or a vendor library refused; the errno / return code is kept.
    #[error("{context}")]
    Host {
        /// What was being done.
        context: String,
        /// The kernel's errno, when it was a refused system call.
        errno: Option<i32>,
        /// NVML's return code, when it was an NVML call.
        nvml_code: Option<u32>,
        /// AMD SMI's status, when it was an AMD SMI call.
        amd_status: Option<u32>,
        /// The underlying failure.
        #[source]
        source: Source,
    },
    /// A vendor library call did not answer in time.
    #[error(
        "{call}{} did not answer within {} ms; vgpud gave up waiting (the call may still complete: the next reconcile checks)",
        gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default(),
        after.as_millis()
    )]
    Timeout {
        /// The vendor call.
        call: String,
        /// The GPU it was about.
        gpu: Option<PciAddress>,
        /// How long vgpud waited.
        after: Duration,
    },
    /// The state store failed.
    #[error("the state store failed")]
    Store(#[from] store::StoreError),
    /// The GPU is quarantined: no new slices or allocations on it (the message says since when
    /// and why).
    #[error("{0}")]
    Quarantined(String),
    /// libvirt cannot be reached (libvirtd down or restarting); nothing was changed.
    #[error("libvirt is unavailable: {0}")]
    LibvirtUnavailable(String),
    /// The request's Placement consumer holds no allocation on this host that matches it, and
    /// consumers are checked strictly: nothing was allocated.
    #[error("placement mismatch: {0}")]
    PlacementMismatch(String),
    /// Placement could not be asked what the request's consumer holds, and consumers are
    /// checked strictly: nothing was allocated.
    #[error("placement is unavailable: {0}")]
    PlacementUnavailable(String),
}

impl EngineError {
    /// The stable machine code of the variant.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::NoCapacity(_) => "no_capacity",
            EngineError::Busy(_) => "busy",
            EngineError::Unsupported(_) => "unsupported",
            EngineError::Conflict(_) => "conflict",
            EngineError::NotFound(_) => "not_found",
            EngineError::InvalidRequest(_) => "invalid_request",
            EngineError::Host { .. } => "host_error",
            EngineError::Timeout { .. } => "timeout",
            EngineError::Store(_) => "store_error",
            EngineError::Quarantined(_) => "quarantined",
            EngineError::LibvirtUnavailable(_) => "libvirt_unavailable",
            EngineError::PlacementMismatch(_) => "placement_mismatch",
            EngineError::PlacementUnavailable(_) => "placement_unavailable",
        }
    }

    /// The kernel's errno, for a host error that had one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            EngineError::Host { errno, .. } => *errno,
            _ => None,
        }
    }

    /// NVML's return code, for a host error from NVML.
    pub fn nvml_code(&self) -> Option<u32> {
        match self {
            EngineError::Host { nvml_code, .. } => *nvml_code,
            _ => None,
        }
    }

    /// AMD SMI's status, for a host error from AMD SMI.
    pub fn amd_status(&self) -> Option<u32> {
        match self {
            EngineError::Host { amd_status, .. } => *amd_status,
            _ => None,
        }
    }

    pub(crate) fn host(context: impl Into<String>, errno: Option<i32>, source: Source) -> Self {
        EngineError::Host {
            context: context.into(),
            errno,
            nvml_code: None,
            amd_status: None,
            source,
        }
    }

    pub(crate) fn from_vfio(context: impl Into<String>, e: vfio::VfioError) -> Self {
        let context = context.into();
        match e.errno() {
            Some(libc::EBUSY) => EngineError::Busy(format!("{context}: {}", chain(&e))),
            errno => Self::host(context, errno, Box::new(e)),
        }
    }

    pub(crate) fn from_mdev(context: impl Into<String>, e: mdev::MdevError) -> Self {
        let context = context.into();
        match &e {
            mdev::MdevError::NoInstancesLeft { .. } => {
                EngineError::NoCapacity(format!("{context}: {e}"))
            }
            mdev::MdevError::UnknownType { .. } => {
                EngineError::InvalidRequest(format!("{context}: {e}"))
            }
            mdev::MdevError::UnknownParent { .. } => {
                EngineError::NotFound(format!("{context}: {e}"))
            }
            mdev::MdevError::AlreadyExists { .. } => {
                EngineError::Conflict(format!("{context}: {e}"))
            }
            _ if e.errno() == Some(libc::EBUSY) => {
                EngineError::Busy(format!("{context}: {}", chain(&e)))
            }
            _ => Self::host(context, e.errno(), Box::new(e)),
        }
    }

    pub(crate) fn from_nvml(
        context: impl Into<String>,
        gpu: PciAddress,
        timeout: Duration,
        e: gpu::NvmlError,
    ) -> Self {
        let context = context.into();
        match e.code {
            gpu::NvmlCode::TIMEOUT => EngineError::Timeout {
                call: e.call.to_owned(),
                gpu: Some(gpu),
                after: timeout,
            },
            gpu::NvmlCode::IN_USE => EngineError::Busy(format!("{context}: {e}")),
            gpu::NvmlCode::INSUFFICIENT_RESOURCES => {
                EngineError::NoCapacity(format!("{context}: {e}"))
            }
            gpu::NvmlCode::NOT_SUPPORTED => EngineError::Unsupported(format!("{context}: {e}")),
            code => EngineError::Host {
                context,
                errno: None,
                nvml_code: Some(code.0),
                amd_status: None,
                source: Box::new(e),
            },
        }
    }

    pub(crate) fn from_amd(
        context: impl Into<String>,
        gpu: PciAddress,
        timeout: Duration,
        e: gpu::AmdError,
    ) -> Self {
        let context = context.into();
        match e.status {
            s if s == crate::engine::vendor::AMD_TIMEOUT => EngineError::Timeout {
                call: e.call.to_owned(),
                gpu: Some(gpu),
                after: timeout,
            },
            gpu::AmdStatus::BUSY => EngineError::Busy(format!("{context}: {e}")),
            status => EngineError::Host {
                context,
                errno: None,
                nvml_code: None,
                amd_status: Some(status.0),
                source: Box::new(e),
            },
        }
    }
}

/// The error and its sources on one line.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    sysfs::error_chain(e)
}

/// Result of an engine operation.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
