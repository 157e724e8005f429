//! A real OpenStack Keystone (PyPI `keystone`) for one test: SQLite and fernet keys in a
//! temporary directory, bootstrapped (`keystone-manage bootstrap`: user `admin` with the admin
//! role in project `admin`, region `RegionOne`), served by gunicorn on a free loopback port.
//! The catalog gets a `placement` service with [`KeystonePeer::register_placement`].
//!
//! The venv is `${VGPUD_KEYSTONE_VENV:-<target dir>/keystone-venv}`
//! (`scripts/lib.sh ensure_keystone_venv`). Without it [`KeystonePeer::start`] is `Ok(None)`
//! (a SKIPPED line), except in CI (`CI` set), where it panics.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::gunicorn::{self, Gunicorn, Service};

/// The bootstrap admin's password.
pub const ADMIN_PASSWORD: &str = "vgpud-test-secret";
/// The region `keystone-manage bootstrap` creates and the catalog entries are in.
pub const REGION: &str = "RegionOne";

/// `keystone.wsgi.api` parses `sys.argv` with oslo.config when imported, and refuses
/// gunicorn's own arguments: the application is imported with them hidden.
const WSGI_SHIM: &str = "import sys\nsys.argv = sys.argv[:1]\nfrom keystone.wsgi.api import application  # noqa: E402,F401\n";

/// Keystone's admin API, called with the bootstrap admin's token (python `requests` from the
/// venv): `keystone_admin.py URL PASSWORD METHOD PATH [JSON]` prints the answer's JSON.
const ADMIN_SCRIPT: &str = r#"import json, sys, requests
url, password, method, path = sys.argv[1:5]
body = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
auth = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
    "name": "admin", "domain": {"name": "Default"}, "password": password}}},
    "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
r = requests.post(url + "/auth/tokens", json=auth, timeout=30)
r.raise_for_status()
h = {"X-Auth-Token": r.headers["X-Subject-Token"]}
r = requests.request(method, url + path, json=body, headers=h, timeout=30)
if r.status_code >= 300:
    sys.exit("%s %s: HTTP %d %s" % (method, path, r.status_code, r.text))
print(r.text)
"#;

/// A running Keystone; stopped when dropped.
pub struct KeystonePeer {
    service: Service,
    _server: Gunicorn,
    _state: tempfile::TempDir,
}

impl KeystonePeer {
    /// Keystone issuing tokens valid for `token_expiration_s` seconds.
    pub fn start(token_expiration_s: u32) -> anyhow::Result<Option<KeystonePeer>> {
        let Some(venv) = gunicorn::venv("VGPUD_KEYSTONE_VENV", "keystone-venv", "Keystone") else {
            return Ok(None);
        };
        let state = tempfile::Builder::new().prefix("keystone-").tempdir()?;
        let dir = state.path();
        let port = gunicorn::free_port()?;
        let url = format!("http://127.0.0.1:{port}/v3");
        let conf = dir.join("keystone.conf");
        std::fs::write(&conf, config_text(dir, token_expiration_s))?;
        std::fs::write(dir.join("keystone_wsgi.py"), WSGI_SHIM)?;
        std::fs::write(dir.join("keystone_admin.py"), ADMIN_SCRIPT)?;
        let manage = |args: &[&str]| manage(&venv, &conf, args);
        manage(&["db_sync"])?;
        let me = ["--keystone-user", "root", "--keystone-group", "root"];
        manage(&[&["fernet_setup"][..], &me].concat())?;
        manage(&[&["credential_setup"][..], &me].concat())?;
        manage(&[
            "bootstrap",
            "--bootstrap-password",
            ADMIN_PASSWORD,
            "--bootstrap-region-id",
            REGION,
            "--bootstrap-admin-url",
            &url,
            "--bootstrap-internal-url",
            &url,
            "--bootstrap-public-url",
            &url,
        ])?;
        let service = Service {
            venv,
            state: dir.to_owned(),
            app: "keystone_wsgi:application".into(),
            env: vec![(
                "OS_KEYSTONE_CONFIG_FILES".into(),
                conf.display().to_string(),
            )],
            tls: None,
            port,
            probe: "/v3".into(),
        };
        let server = service.start()?;
        Ok(Some(KeystonePeer {
            service,
            _server: server,
            _state: state,
        }))
    }

    /// `http://127.0.0.1:<port>/v3`.
    pub fn auth_url(&self) -> String {
        format!("{}/v3", self.service.url())
    }

    /// Its log (with the access log: one line per request) so far.
    pub fn log(&self) -> String {
        self.service.log()
    }

    /// How many tokens were issued so far to clients whose User-Agent contains `agent`
    /// (`POST /v3/auth/tokens` answered 201 in the access log; Placement's middleware and the
    /// harness's admin calls get tokens too).
    pub fn tokens_issued_to(&self, agent: &str) -> usize {
        self.log()
            .lines()
            .filter(|l| {
                l.contains("\"POST /v3/auth/tokens") && l.contains("\" 201 ") && l.contains(agent)
            })
            .count()
    }

    /// A `placement` service in the catalog with `url` on each of `interfaces` in `region`.
    pub fn register_placement(
        &self,
        url: &str,
        interfaces: &[&str],
        region: &str,
    ) -> anyhow::Result<()> {
        let created = self.admin(
            "POST",
            "/services",
            Some(&serde_json::json!({"service": {"type": "placement", "name": "placement"}})),
        )?;
        let id = created["service"]["id"]
            .as_str()
            .context("no service id")?
            .to_owned();
        for interface in interfaces {
            self.admin(
                "POST",
                "/endpoints",
                Some(&serde_json::json!({"endpoint": {
                    "service_id": id, "interface": interface, "url": url, "region_id": region}})),
            )?;
        }
        Ok(())
    }

    /// A user `name` in domain Default with the admin role in project `admin` (the role
    /// Placement's policy asks for).
    pub fn create_admin_user(&self, name: &str, password: &str) -> anyhow::Result<()> {
        let user = self.admin(
            "POST",
            "/users",
            Some(&serde_json::json!({"user": {
                "name": name, "password": password, "domain_id": "default"}})),
        )?;
        let user = user["user"]["id"]
            .as_str()
            .context("no user id")?
            .to_owned();
        let project = self.admin("GET", "/projects?name=admin", None)?;
        let project = project["projects"][0]["id"]
            .as_str()
            .context("no admin project")?
            .to_owned();
        let role = self.admin("GET", "/roles?name=admin", None)?;
        let role = role["roles"][0]["id"]
            .as_str()
            .context("no admin role")?
            .to_owned();
        self.admin(
            "PUT",
            &format!("/projects/{project}/users/{user}/roles/{role}"),
            None,
        )?;
        Ok(())
    }

    /// Revokes every token of user `name` issued so far (disabling a user revokes its tokens),
    /// then enables it again.
    pub fn revoke_tokens_of(&self, name: &str) -> anyhow::Result<()> {
        let users = self.admin("GET", &format!("/users?name={name}"), None)?;
        let id = users["users"][0]["id"]
            .as_str()
            .with_context(|| format!("no user {name}"))?
            .to_owned();
        let path = format!("/users/{id}");
        let set = |enabled: bool| {
            self.admin(
                "PATCH",
                &path,
                Some(&serde_json::json!({"user": {"enabled": enabled}})),
            )
        };
        set(false)?;
        // Keystone's revocation events have one-second resolution: a token issued in the same
        // second as the event would be revoked too.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        set(true)?;
        std::thread::sleep(std::time::Duration::from_millis(1100));
        Ok(())
    }

    fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let mut cmd = Command::new(self.service.venv.join("bin/python"));
        cmd.arg(self.service.state.join("keystone_admin.py"))
            .arg(self.auth_url())
            .arg(ADMIN_PASSWORD)
            .arg(method)
            .arg(path);
        if let Some(body) = body {
            cmd.arg(body.to_string());
        }
        let out = cmd.output().context("run keystone_admin.py")?;
        if !out.status.success() {
            bail!(
                "Keystone {method} {path}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        if text.trim().is_empty() {
            return Ok(serde_json::Value::Null);
        }
        Ok(serde_json::from_str(&text)?)
    }
}

fn config_text(dir: &Path, token_expiration_s: u32) -> String {
    format!(
        "[DEFAULT]\n\
         [database]\nconnection = sqlite:///{db}\n\
         [fernet_tokens]\nkey_repository = {dir}/fernet-keys\n\
         [fernet_receipts]\nkey_repository = {dir}/fernet-keys\n\
         [credential]\nkey_repository = {dir}/credential-keys\n\
         [token]\nexpiration = {token_expiration_s}\n",
        db = dir.join("keystone.db").display(),
        dir = dir.display(),
    )
}

fn manage(venv: &Path, conf: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(venv.join("bin/keystone-manage"))
        .arg("--config-file")
        .arg(conf)
        .args(args)
        .output()
        .context("run keystone-manage")?;
    if !out.status.success() {
        bail!(
            "keystone-manage {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
