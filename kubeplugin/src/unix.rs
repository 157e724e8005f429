//! gRPC clients over kubelet's unix sockets (tonic dials TCP by default; kubelet serves
//! `Registration` and `PodResourcesLister` only on unix sockets).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tower::service_fn;

/// How long connecting to kubelet and each call may take: kubelet answers at once or is down.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A channel to the gRPC server on `socket`; every call on it has [`CALL_TIMEOUT`].
pub async fn channel(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let socket: PathBuf = socket.to_owned();
    // The URI is required by the API and unused: the connector ignores it.
    Endpoint::from_static("http://kubelet.localhost")
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect_with_connector(service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
}
