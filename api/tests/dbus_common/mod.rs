//! Shared set-up for the D-Bus tests: a private `dbus-daemon` (killed on drop) and a fake polkit
//! authority on it that answers per caller and action and records what it was asked. Where
//! `dbus-daemon` is not installed the tests are skipped with a message, and fail instead when
//! `CI` is set (`scripts/test` sets it under `VGPUD_CI=1`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::dbus::BUS_NAME;
use serde::Serialize;
use zbus::wire::DynamicType;
use zbus::{Connection, OwnedVariant};

/// A private bus; killed on drop.
pub struct Bus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    /// A new bus; `None` (after saying why) where `dbus-daemon` cannot run, unless `CI` is set.
    pub fn start() -> Option<Bus> {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bus.conf");
        let socket = dir.path().join("bus");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let spawned = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "cannot run dbus-daemon ({e}); install the Debian package dbus-daemon"
                );
                eprintln!("skipping the D-Bus test: cannot run dbus-daemon ({e})");
                return None;
            }
        };
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line.trim().to_owned();
        assert!(address.starts_with("unix:"), "dbus-daemon said {line:?}");
        Some(Bus {
            child,
            address,
            _dir: dir,
        })
    }

    pub async fn client(&self) -> Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .unwrap()
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the fake polkit answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Yes for (caller, action) pairs in the allow list, no otherwise.
    Rules,
    /// An error reply.
    Fail,
    /// No answer for a long time.
    Hang,
    /// "Needs authentication" for everyone.
    Challenge,
}

#[derive(Debug, Clone)]
pub struct Asked {
    pub subject_kind: String,
    pub name: String,
    pub action: String,
    pub flags: u32,
}

#[derive(Clone)]
pub struct FakePolkit {
    mode: Arc<Mutex<Mode>>,
    allowed: Arc<Mutex<HashSet<(String, String)>>>,
    pub asked: Arc<Mutex<Vec<Asked>>>,
}

type Subject = (String, HashMap<String, OwnedVariant>);
type Decision = (bool, bool, HashMap<String, String>);

#[zbus::interface(name = "org.freedesktop.PolicyKit1.Authority")]
impl FakePolkit {
    async fn check_authorization(
        &self,
        subject: Subject,
        action_id: String,
        _details: HashMap<String, String>,
        flags: u32,
        _cancellation_id: String,
    ) -> zbus::fdo::Result<(Decision,)> {
        let name = subject
            .1
            .get("name")
            .and_then(|v| String::try_from(v.try_clone().unwrap()).ok())
            .unwrap_or_default();
        self.asked.lock().unwrap().push(Asked {
            subject_kind: subject.0.clone(),
            name: name.clone(),
            action: action_id.clone(),
            flags,
        });
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Fail => Err(zbus::fdo::Error::Failed("polkit broke".into())),
            Mode::Hang => {
                tokio::time::sleep(Duration::from_secs(20)).await;
                Ok(((true, false, HashMap::new()),))
            }
            Mode::Challenge => Ok(((false, true, HashMap::new()),)),
            Mode::Rules => {
                let yes = subject.0 == "system-bus-name"
                    && self.allowed.lock().unwrap().contains(&(name, action_id));
                Ok(((yes, false, HashMap::new()),))
            }
        }
    }
}

impl FakePolkit {
    pub async fn serve(bus: &Bus) -> (FakePolkit, Connection) {
        let fake = FakePolkit {
            mode: Arc::new(Mutex::new(Mode::Rules)),
            allowed: Arc::default(),
            asked: Arc::default(),
        };
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .serve_at("/org/freedesktop/PolicyKit1/Authority", fake.clone())
            .name("org.freedesktop.PolicyKit1")
            .build()
            .await
            .unwrap();
        (fake, conn)
    }

    pub fn allow(&self, conn: &Connection, action: &str) {
        let name = conn.unique_name().unwrap().to_string();
        self.allowed
            .lock()
            .unwrap()
            .insert((name, action.to_owned()));
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

pub async fn call<B, R>(
    conn: &Connection,
    path: &str,
    iface: &str,
    method: &str,
    body: &B,
) -> zbus::Result<R>
where
    B: Serialize + DynamicType,
    R: for<'d> serde::Deserialize<'d> + zbus::wire::Type,
{
    let reply = conn
        .call_method(Some(BUS_NAME), path, Some(iface), method, body)
        .await?;
    reply.body().deserialize::<R>()
}

pub fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        zbus::Error::FDO(e) => zbus::DBusError::name(&**e).to_string(),
        other => format!("not a method error: {other:?}"),
    }
}
