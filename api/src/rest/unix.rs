//! The unix-socket listener: the default way in. Who may connect is decided by the socket's mode
//! and group; each request carries the peer's credentials as its [`Caller`].

use std::future::Future;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use super::auth::Caller;
use super::conn_limits::{ConnLimits, PeerKey};
use super::head::Refusal;
use super::serve::{Listen, serve};
use crate::error::ApiError;

/// How long requests in flight may take to finish after shutdown was asked for. Event streams
/// never finish by themselves; they are cut after this.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The unix listener: each peer counts against its uid and carries its credentials.
struct PeerListener {
    inner: UnixListener,
}

impl Listen for PeerListener {
    type Raw = (UnixStream, Caller);
    type Io = UnixStream;
    type Peer = Caller;
    // A local client writes its head as soon as it connects: a connection that has sent none
    // by the time a newcomer needs its place is the silent one.
    const EVICT_MIN_AGE: Duration = Duration::ZERO;

    async fn accept(&self) -> std::io::Result<((UnixStream, Caller), PeerKey)> {
        loop {
            let (stream, _) = self.inner.accept().await?;
            match stream.peer_cred() {
                Ok(cred) => {
                    let caller = Caller::Unix {
                        uid: cred.uid(),
                        gid: cred.gid(),
                        pid: cred.pid(),
                    };
                    tracing::debug!(%caller, "API connection");
                    return Ok(((stream, caller), PeerKey::Uid(cred.uid())));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "API connection without peer credentials dropped")
                }
            }
        }
    }

    async fn open(&self, raw: (UnixStream, Caller)) -> std::io::Result<(UnixStream, Caller)> {
        Ok(raw)
    }

    fn refuse(&self, (stream, _): (UnixStream, Caller)) {
        // One try, never a wait: a peer that floods the socket does not read anyway.
        let refusal = Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "too many connections: try again later",
        );
        let _ = stream.try_write(&refusal.to_bytes());
    }
}

/// Serves `router` on a unix socket at `socket` with permission bits `mode` (e.g. `0o660`) and
/// group `group`, until `shutdown` resolves; then requests in flight get [`SHUTDOWN_GRACE`] to
/// finish and the socket file is removed.
///
/// The socket is made under a temporary name, given its mode and group, and only then renamed
/// into place: no client ever sees it with looser permissions. A stale socket file (nobody
/// listening) is replaced; a live one, or any other kind of file, is an error.
pub async fn serve_unix(
    router: Router,
    socket: &Path,
    mode: u32,
    group: Option<&str>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    serve_unix_limited(router, socket, mode, group, ConnLimits::default(), shutdown).await
}

/// [`serve_unix`] with the transport limits `limits`.
pub async fn serve_unix_limited(
    router: Router,
    socket: &Path,
    mode: u32,
    group: Option<&str>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let listener = bind(socket, mode, group).await?;
    tracing::info!(socket = %socket.display(), mode = format!("{mode:04o}"), group, "REST API listening");
    let result = serve_with_grace(shutdown, move |signal| {
        serve(PeerListener { inner: listener }, router, limits, signal)
    })
    .await;
    if let Err(e) = std::fs::remove_file(socket) {
        tracing::debug!(error = %e, socket = %socket.display(), "socket file not removed");
    }
    result.map_err(|e| ApiError::listener(format!("serving on {}", socket.display()), e))
}

/// Runs a server until `shutdown`, then gives it [`SHUTDOWN_GRACE`] to finish gracefully: the
/// server is handed a flag that turns true at shutdown, and is dropped after the grace.
pub(super) async fn serve_with_grace<F, Fut>(
    shutdown: impl Future<Output = ()> + Send + 'static,
    server: F,
) -> std::io::Result<()>
where
    F: FnOnce(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = std::io::Result<()>>,
{
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let mut deadline = rx.clone();
    tokio::select! {
        r = server(rx) => r,
        _ = async move {
            let _ = deadline.wait_for(|v| *v).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::info!("REST connections still open after the grace period were closed");
            Ok(())
        }
    }
}

async fn bind(socket: &Path, mode: u32, group: Option<&str>) -> Result<UnixListener, ApiError> {
    remove_stale(socket).await?;
    let gid = group.map(group_id).transpose()?;
    let private = PrivateDir::create(socket)?;
    let temp = private.path.join("api.sock");
    let listener = UnixListener::bind(&temp)
        .map_err(|e| ApiError::listener(format!("binding {}", temp.display()), e))?;
    // Inside a directory only this process's user can enter, nobody can swap the fresh socket for
    // a symlink before its mode and group are set, so they land on the socket itself (and the
    // chown would not follow a link anyway).
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        ApiError::listener(format!("setting mode {mode:04o} on {}", temp.display()), e)
    })?;
    if let Some(gid) = gid {
        std::os::unix::fs::lchown(&temp, None, Some(gid)).map_err(|e| {
            ApiError::listener(format!("giving {} to group {gid}", temp.display()), e)
        })?;
    }
    std::fs::rename(&temp, socket)
        .map_err(|e| ApiError::listener(format!("moving the socket to {}", socket.display()), e))?;
    Ok(listener)
}

/// A directory of mode 0700 beside the socket, where the socket is made and set up before it is
/// renamed into place (a rename within one file system). Removed when dropped.
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create(socket: &Path) -> Result<Self, ApiError> {
        use std::os::unix::fs::DirBuilderExt;
        let parent = socket
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = socket.file_name().unwrap_or_default().to_string_lossy();
        let path = parent.join(format!(".{name}.new-{}", std::process::id()));
        // Left by a crashed daemon that had the same pid: ours to clear. remove_dir_all does not
        // follow a symlink put there; it removes the link.
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_file(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| ApiError::listener(format!("creating {}", path.display()), e))?;
        Ok(Self { path })
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

async fn remove_stale(socket: &Path) -> Result<(), ApiError> {
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ApiError::listener(
                format!("checking {}", socket.display()),
                e,
            ));
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ApiError::listener(
            format!(
                "{} exists and is not a socket; not replacing it",
                socket.display()
            ),
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        ));
    }
    if UnixStream::connect(socket).await.is_ok() {
        return Err(ApiError::listener(
            format!("another process serves {}", socket.display()),
            std::io::Error::from(std::io::ErrorKind::AddrInUse),
        ));
    }
    std::fs::remove_file(socket).map_err(|e| {
        ApiError::listener(format!("removing the stale socket {}", socket.display()), e)
    })
}

/// A group's id from `/etc/group` (system groups such as `vgpud` live there; sysusers makes it).
fn group_id(name: &str) -> Result<u32, ApiError> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let text = std::fs::read_to_string("/etc/group")
        .map_err(|e| ApiError::listener("reading /etc/group".into(), e))?;
    gid_in(&text, name).ok_or_else(|| {
        ApiError::listener(
            format!("group {name:?} is not in /etc/group"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )
    })
}

fn gid_in(etc_group: &str, name: &str) -> Option<u32> {
    etc_group.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next() == Some(name))
            .then(|| f.nth(1).and_then(|g| g.parse().ok()))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_found_by_name() {
        let text = "root:x:0:\nvgpud:x:998:alice,bob\nbad line\n";
        assert_eq!(gid_in(text, "vgpud"), Some(998));
        assert_eq!(gid_in(text, "root"), Some(0));
        assert_eq!(gid_in(text, "nobody"), None);
        assert_eq!(group_id("42").unwrap(), 42);
    }

    #[tokio::test]
    async fn the_socket_is_set_up_where_nobody_else_can_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        // A symlink planted where the private directory goes points at a victim file: binding
        // replaces the link and never touches the victim's mode.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let planted = dir
            .path()
            .join(format!(".api.sock.new-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();

        let _listener = bind(&socket, 0o660, None).await.unwrap();
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        let victim_mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(victim_mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["api.sock", "victim"],
            "nothing else is left beside the socket"
        );
    }
}
