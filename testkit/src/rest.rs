//! The REST router served on a unix socket, as the daemon serves it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::service::Service;
use api::rest::{self, RestOptions};
use tokio::net::UnixStream;
use tokio::sync::oneshot;

/// A REST server on a unix socket, stopped by [`RestServer::stop`] (or when dropped, without
/// waiting).
#[derive(Debug)]
pub struct RestServer {
    /// The socket clients connect to.
    pub socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RestServer {
    /// Serves `service` on `socket` (mode 0600) and returns once the socket accepts.
    pub async fn start(service: Service, options: RestOptions, socket: &Path) -> RestServer {
        let router = rest::router(service, options);
        let (stop, stopped) = oneshot::channel();
        let path = socket.to_owned();
        let task = tokio::spawn(async move {
            rest::serve_unix(router, &path, 0o600, None, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        for _ in 0..200 {
            if UnixStream::connect(socket).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        RestServer {
            socket: socket.to_owned(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the server and waits for it (the socket file goes).
    pub async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }
}
