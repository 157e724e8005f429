//! A real OpenStack Placement (PyPI `openstack-placement` 16.0.0) for one test: SQLite in a
//! temporary directory, served by gunicorn on a free loopback port, with `noauth2` (the token
//! `admin` has the admin role; none → 401, any other → 403) or Keystone's auth middleware.
//!
//! The venv is `${VGPUD_PLACEMENT_VENV:-<target dir>/placement-venv}`; `scripts/lib.sh`'s
//! `ensure_placement_venv` makes it. Without it [`PlacementPeer::start`] is `Ok(None)` (a
//! SKIPPED line), except in CI (`CI` set), where it panics.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::gunicorn::{self, Gunicorn, Service};

/// The token Placement's `noauth2` gives the admin role.
pub const ADMIN_TOKEN: &str = "admin";

/// Keystone credentials Placement's auth middleware (keystonemiddleware) validates tokens
/// with.
#[derive(Clone, Debug)]
pub struct MiddlewareAuth {
    /// Keystone's URL, `http://127.0.0.1:port/v3`.
    pub auth_url: String,
    /// A user with the admin role in `project`, domain `Default`.
    pub username: String,
    /// Its password.
    pub password: String,
    /// Its project.
    pub project: String,
}

/// A running Placement; stopped when dropped.
pub struct PlacementPeer {
    service: Service,
    server: Option<Gunicorn>,
    _state: tempfile::TempDir,
}

impl PlacementPeer {
    /// Placement over http with noauth2.
    pub fn start() -> anyhow::Result<Option<PlacementPeer>> {
        Self::start_with(None, None)
    }

    /// Placement over https with this certificate and key (PEM), noauth2.
    pub fn start_tls(cert: &Path, key: &Path) -> anyhow::Result<Option<PlacementPeer>> {
        Self::start_with(Some((cert.to_owned(), key.to_owned())), None)
    }

    /// Placement over http validating tokens with Keystone (`auth_strategy = keystone`).
    pub fn start_keystone(auth: &MiddlewareAuth) -> anyhow::Result<Option<PlacementPeer>> {
        Self::start_with(None, Some(auth))
    }

    fn start_with(
        tls: Option<(PathBuf, PathBuf)>,
        keystone: Option<&MiddlewareAuth>,
    ) -> anyhow::Result<Option<PlacementPeer>> {
        let Some(venv) = gunicorn::venv(
            "VGPUD_PLACEMENT_VENV",
            "placement-venv",
            "OpenStack Placement",
        ) else {
            return Ok(None);
        };
        let state = tempfile::Builder::new().prefix("placement-").tempdir()?;
        std::fs::write(
            state.path().join("placement.conf"),
            config_text(state.path(), keystone),
        )?;
        db_sync(&venv, state.path())?;
        let service = Service {
            venv,
            state: state.path().to_owned(),
            app: "placement.wsgi.api:application".into(),
            env: vec![(
                "OS_PLACEMENT_CONFIG_DIR".into(),
                state.path().display().to_string(),
            )],
            tls,
            port: gunicorn::free_port()?,
            probe: "/".into(),
        };
        let server = service.start()?;
        Ok(Some(PlacementPeer {
            service,
            server: Some(server),
            _state: state,
        }))
    }

    /// `http://127.0.0.1:<port>` (https with [`PlacementPeer::start_tls`]).
    pub fn url(&self) -> String {
        self.service.url()
    }

    /// Its log (gunicorn's and Placement's, with the access log) so far.
    pub fn log(&self) -> String {
        self.service.log()
    }

    /// Stops it (its database stays, for [`PlacementPeer::start_again`]).
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop();
        }
    }

    /// Starts it again on the same port with the same database.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        if self.server.is_some() {
            bail!("Placement is running already");
        }
        self.server = Some(self.service.start()?);
        Ok(())
    }
}

impl Drop for PlacementPeer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Placement's configuration: SQLite in `state`, noauth2 or Keystone's middleware.
fn config_text(state: &Path, keystone: Option<&MiddlewareAuth>) -> String {
    let db = state.join("placement.db");
    let mut text = format!(
        "[DEFAULT]\ndebug = false\n[placement_database]\nconnection = sqlite:///{}\n",
        db.display()
    );
    match keystone {
        None => text.push_str("[api]\nauth_strategy = noauth2\n"),
        Some(auth) => text.push_str(&format!(
            "[api]\nauth_strategy = keystone\n\
             [keystone_authtoken]\n\
             www_authenticate_uri = {url}\nauth_url = {url}\nauth_type = password\n\
             username = {user}\npassword = {password}\nproject_name = {project}\n\
             user_domain_name = Default\nproject_domain_name = Default\n\
             # No validation cache: a revoked token is refused at once.\n\
             token_cache_time = -1\n",
            url = auth.auth_url,
            user = auth.username,
            password = auth.password,
            project = auth.project,
        )),
    }
    text
}

/// `placement-manage db sync`: the schema, in a fresh SQLite file.
fn db_sync(venv: &Path, state: &Path) -> anyhow::Result<()> {
    let out = Command::new(venv.join("bin/placement-manage"))
        .arg("--config-dir")
        .arg(state)
        .args(["db", "sync"])
        .env("OS_PLACEMENT_CONFIG_DIR", state)
        .output()
        .context("run placement-manage")?;
    if !out.status.success() {
        bail!(
            "placement-manage db sync failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
