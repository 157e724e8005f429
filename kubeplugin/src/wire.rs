//! kubelet's APIs, generated at build time from `proto/` (written from the published API
//! descriptions: the device plugin API `v1beta1` and PodResources `v1`).

/// `deviceplugin/v1beta1`: `Registration` (kubelet serves it) and `DevicePlugin` (vgpud does).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");
}

/// `podresources/v1`: the pods kubelet runs and the devices each holds.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod podresources {
    tonic::include_proto!("v1");
}
