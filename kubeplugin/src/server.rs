//! One resource's device plugin server: its socket in kubelet's device plugin directory and
//! the task serving it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::context::Context;
use crate::plugin::Plugin;
use crate::wire::deviceplugin::device_plugin_server::DevicePluginServer;

/// The longest kubelet may take over one call, and the most requests it may have in flight
/// on one connection: kubelet sends one at a time per resource, a stuck or flooding client
/// on this socket (root only) cannot hold the plugin.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const REQUESTS_PER_CONNECTION: usize = 16;
/// Allocate and preference requests name device ids; 1 MiB is thousands of them.
const MAX_REQUEST_BYTES: usize = 1 << 20;
/// How long a stopping server may take to close its connections.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A file's identity, to notice it replaced (kubelet re-creates its socket when it restarts
/// and removes the plugins' sockets): device, inode and inode change time. The change time is
/// there because a file system reuses a freed inode number at once (ext4 and tmpfs do), so a
/// socket removed and made again often has the old number.
pub type FileId = (u64, u64, i64, i64);

/// The identity of the file at `path`, when there is one.
pub fn file_id(path: &Path) -> Option<FileId> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// The socket file name of a resource's plugin (what `Register` names as the endpoint).
pub fn socket_name(resource: &str) -> String {
    format!("vgpud-{}.sock", resource.replace('/', "_"))
}

/// A running plugin server.
pub struct Served {
    /// The socket's path.
    pub socket: PathBuf,
    /// The socket file as bound (replaced or gone: the server must be started again).
    pub socket_id: Option<FileId>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Served {
    /// Binds the resource's socket (replacing a stale one) and serves it.
    pub fn start(ctx: &Context, resource: &str) -> std::io::Result<Served> {
        let socket = ctx.config.device_plugin_dir.join(socket_name(resource));
        match std::fs::remove_file(&socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(&socket)?;
        // Only kubelet (root) talks to a device plugin.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        let (stop, stopped) = watch::channel(false);
        let plugin = Plugin::new(ctx.clone(), resource.to_owned(), stopped.clone());
        let service = DevicePluginServer::new(plugin).max_decoding_message_size(MAX_REQUEST_BYTES);
        let name = resource.to_owned();
        let task = tokio::spawn(async move {
            let mut stopped = stopped;
            let served = Server::builder()
                .timeout(REQUEST_TIMEOUT)
                .concurrency_limit_per_connection(REQUESTS_PER_CONNECTION)
                .add_service(service)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(resource = %name, "the device plugin server failed: {e}");
            }
        });
        Ok(Served {
            socket_id: file_id(&socket),
            socket,
            stop,
            task,
        })
    }

    /// Whether the socket file is still the one this server bound.
    pub fn socket_intact(&self) -> bool {
        self.socket_id.is_some() && file_id(&self.socket) == self.socket_id
    }

    /// Whether the server task has ended (it failed).
    pub fn ended(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops serving (streams end, connections close) and removes the socket if it is ours.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(STOP_GRACE, &mut task).await.is_err() {
            task.abort();
        }
        if self.socket_id.is_some() && file_id(&self.socket) == self.socket_id {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}
