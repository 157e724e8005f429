//! The state every object shares, and keeping the exported objects in step with the engine.
//!
//! One sync at a time: read slices and allocations (and, when asked, the inventory) from the
//! service, build the new [`View`], then remove the objects that went away, add the new ones
//! (the ObjectManager announces both) and emit PropertiesChanged for what differs. A sync runs
//! after every batch of engine events and before a mutating method replies, so the objects a
//! reply names exist when the caller receives it.
//!
//! Nothing here takes an interface's lock: the objects are handles onto [`Shared`], and
//! PropertiesChanged is emitted from the view, so a sync inside a method call cannot deadlock
//! against the call's own interface.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent::engine::Event;
use agent::service::Service;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath, Variant};

use super::error::DbusError;
use super::objects::{GpuObject, ManagerObject, SliceObject};
use super::paths::{MANAGER_PATH, gpu_path, slice_path};
use super::polkit::{self, Action, PolkitTimeouts};
use super::view::{HostFacts, View, wire_name};

/// What the manager, GPU and slice objects share.
#[derive(Debug)]
pub(crate) struct Shared {
    service: Service,
    timeouts: PolkitTimeouts,
    root_asks_polkit: bool,
    host: Mutex<HostFacts>,
    view: Mutex<View>,
    sync_lock: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn new(service: Service, options: super::DbusOptions) -> Self {
        Self {
            service,
            timeouts: options.polkit_timeouts,
            root_asks_polkit: options.root_asks_polkit,
            host: Mutex::new(HostFacts::default()),
            view: Mutex::new(View::default()),
            sync_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs a blocking service call off the async threads.
    pub(crate) async fn blocking<T, F>(&self, f: F) -> Result<T, DbusError>
    where
        T: Send + 'static,
        F: FnOnce(&Service) -> T + Send + 'static,
    {
        let service = self.service.clone();
        tokio::task::spawn_blocking(move || f(&service))
            .await
            .map_err(|e| DbusError::failed(format!("the service call did not finish: {e}")))
    }

    /// Runs a fallible blocking service call; engine errors become their D-Bus names.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T, DbusError>
    where
        T: Send + 'static,
        F: FnOnce(&Service) -> agent::service::Result<T> + Send + 'static,
    {
        Ok(self.blocking(f).await??)
    }

    /// Reads the last published view.
    pub(crate) fn view<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        f(&lock(&self.view))
    }

    /// Asks polkit about the caller of `header`.
    pub(crate) async fn authorize(
        &self,
        conn: &Connection,
        header: &zbus::message::Header<'_>,
        action: Action,
    ) -> Result<(), DbusError> {
        polkit::authorize(conn, header, action, self.timeouts).await
    }

    /// Whether the caller sees tenants' names in JSON answers (`redact.rs`).
    pub(crate) async fn may_read_tenants(
        &self,
        conn: &Connection,
        header: &zbus::message::Header<'_>,
    ) -> bool {
        super::redact::may_read_tenants(conn, header, self.timeouts, self.root_asks_polkit).await
    }

    /// Brings the exported objects in line with the service. Failures are logged: the next sync
    /// tries again, and a caller's operation has already happened.
    pub(crate) async fn sync(self: &Arc<Self>, conn: &Connection, refresh_host: bool) {
        let _one_at_a_time = self.sync_lock.lock().await;
        let fetched = self
            .blocking(move |s| {
                let host = refresh_host.then(|| HostFacts::from_inventory(&s.host()));
                let quarantines = s.engine().quarantines();
                (host, s.slices(), s.allocations(), quarantines)
            })
            .await;
        let (host, slices, allocations, quarantines) = match fetched {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("D-Bus objects not refreshed: {e}");
                return;
            }
        };
        let new = {
            let mut facts = lock(&self.host);
            if let Some(host) = host {
                *facts = host;
            }
            View::build(&facts, &slices, &allocations, &quarantines)
        };
        let old = std::mem::replace(&mut *lock(&self.view), new.clone());
        if let Err(e) = self.publish(conn, &old, &new).await {
            tracing::warn!("D-Bus objects partly refreshed: {e}");
        }
    }

    async fn publish(
        self: &Arc<Self>,
        conn: &Connection,
        old: &View,
        new: &View,
    ) -> zbus::Result<()> {
        let server = conn.object_server();
        for id in old.slices.keys().filter(|id| !new.slices.contains_key(id)) {
            server.remove::<SliceObject, _>(slice_path(id)).await?;
        }
        for gpu in old.gpus.keys().filter(|g| !new.gpus.contains_key(g)) {
            server.remove::<GpuObject, _>(gpu_path(gpu)).await?;
        }
        for gpu in new.gpus.keys().filter(|g| !old.gpus.contains_key(g)) {
            let object = GpuObject::new(self.clone(), *gpu);
            server.at(gpu_path(gpu), object).await?;
        }
        for id in new.slices.keys().filter(|id| !old.slices.contains_key(id)) {
            let object = SliceObject::new(self.clone(), *id);
            server.at(slice_path(id), object).await?;
        }
        emit_changes(
            conn,
            OwnedObjectPath::try_from(MANAGER_PATH)?,
            ManagerObject::NAME,
            old.manager.changes(&new.manager),
        )
        .await?;
        for (gpu, props) in &new.gpus {
            if let Some(before) = old.gpus.get(gpu) {
                emit_changes(conn, gpu_path(gpu), GpuObject::NAME, before.changes(props)).await?;
            }
        }
        for (id, props) in &new.slices {
            if let Some(before) = old.slices.get(id) {
                emit_changes(
                    conn,
                    slice_path(id),
                    SliceObject::NAME,
                    before.changes(props),
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// One PropertiesChanged per object, with every property that changed.
async fn emit_changes(
    conn: &Connection,
    path: OwnedObjectPath,
    interface: &'static str,
    changes: Vec<(&'static str, Variant<'static>)>,
) -> zbus::Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let emitter = SignalEmitter::new(conn, path)?;
    let changed: HashMap<&str, Variant<'_>> = changes.into_iter().collect();
    zbus::fdo::Properties::properties_changed(
        &emitter,
        zbus::names::InterfaceName::from_static_str_unchecked(interface),
        changed,
        std::borrow::Cow::Borrowed(&[]),
    )
    .await
}

/// Follows the engine's events until the connection closes: syncs the objects after each batch
/// of events, then emits the manager's signal for each event.
pub(crate) async fn follow_events(
    shared: Arc<Shared>,
    conn: Connection,
    mut events: broadcast::Receiver<Event>,
) {
    loop {
        let first = tokio::select! {
            () = conn.closed() => return,
            received = events.recv() => received,
        };
        let mut batch = Vec::new();
        let mut lost = false;
        match first {
            Ok(event) => batch.push(event),
            Err(RecvError::Lagged(_)) => lost = true,
            Err(RecvError::Closed) => return,
        }
        loop {
            match events.try_recv() {
                Ok(event) => batch.push(event),
                Err(TryRecvError::Lagged(_)) => lost = true,
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        if lost {
            tracing::warn!("D-Bus fell behind the engine's events: some signals were not sent");
        }
        let refresh_host = lost || batch.iter().any(changes_host);
        shared.sync(&conn, refresh_host).await;
        for event in &batch {
            if let Err(e) = emit_event(&conn, event).await {
                tracing::warn!("D-Bus signal for {event:?} not sent: {e}");
            }
        }
    }
}

/// Events after which the inventory is read again (GPUs gone or back, MIG mode, foreign slices).
fn changes_host(event: &Event) -> bool {
    matches!(
        event,
        Event::Drift { .. }
            | Event::ForeignFound { .. }
            | Event::LayoutStatus { .. }
            | Event::DeviceRemoved { .. }
            | Event::DeviceAdded { .. }
            | Event::ReconcileDone { .. }
    )
}

async fn emit_event(conn: &Connection, event: &Event) -> zbus::Result<()> {
    let emitter = SignalEmitter::new(conn, MANAGER_PATH)?;
    let e = &emitter;
    match event {
        Event::SliceCreated {
            slice,
            gpu,
            backend,
        } => {
            let path = slice_path(slice);
            ManagerObject::slice_created(
                e,
                path.as_ref(),
                &slice.to_string(),
                &gpu.to_string(),
                backend.as_str(),
            )
            .await
        }
        Event::SliceDestroyed { slice, gpu } => {
            let path = slice_path(slice);
            ManagerObject::slice_destroyed(e, path.as_ref(), &slice.to_string(), &gpu.to_string())
                .await
        }
        Event::AllocationCreated {
            allocation,
            consumer,
            slices,
        } => {
            let paths: Vec<OwnedObjectPath> = slices.iter().map(slice_path).collect();
            let consumer = super::redact::public(consumer);
            ManagerObject::allocation_created(e, &allocation.to_string(), &consumer, paths).await
        }
        Event::AllocationReleased { allocation } => {
            ManagerObject::allocation_released(e, &allocation.to_string()).await
        }
        Event::Drift { slice, gpu, reason } => {
            let path = slice_path(slice);
            ManagerObject::drift(
                e,
                path.as_ref(),
                &slice.to_string(),
                &gpu.to_string(),
                reason,
            )
            .await
        }
        Event::ForeignFound { gpu, slice } => {
            ManagerObject::foreign_found(e, &gpu.to_string(), slice).await
        }
        Event::LayoutStatus {
            gpu,
            state,
            reasons,
        } => {
            ManagerObject::layout_status(e, &gpu.to_string(), &wire_name(state), reasons.clone())
                .await
        }
        Event::StaleVmLink {
            domain,
            allocation,
            reason,
        } => ManagerObject::stale_vm_link(e, domain, allocation, reason).await,
        Event::GpuQuarantined {
            gpu,
            reason,
            source,
        } => ManagerObject::gpu_quarantined(e, &gpu.to_string(), reason, source.as_str()).await,
        Event::GpuReleased { gpu, how } => {
            ManagerObject::gpu_released(e, &gpu.to_string(), how.as_str()).await
        }
        Event::DeviceRemoved {
            device,
            slices,
            reason,
        } => {
            let paths: Vec<OwnedObjectPath> = slices.iter().map(slice_path).collect();
            ManagerObject::device_removed(e, &device.to_string(), paths, reason).await
        }
        Event::DeviceAdded { device, slices } => {
            let paths: Vec<OwnedObjectPath> = slices.iter().map(slice_path).collect();
            ManagerObject::device_added(e, &device.to_string(), paths).await
        }
        Event::ReconcileDone {
            recreated,
            intents_resolved,
            failed,
            foreign,
        } => {
            let n = |v: &usize| u32::try_from(*v).unwrap_or(u32::MAX);
            ManagerObject::reconcile_done(
                e,
                n(recreated),
                n(intents_resolved),
                n(failed),
                n(foreign),
            )
            .await
        }
    }
}
