//! The blocking Placement client: one method per API call the agent makes, each sending the
//! microversion header and the token, reading Placement's answer into [`crate::model`] types
//! and its error document into [`Error`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use uuid::Uuid;

use crate::auth::{Auth, Credentials, Session};
use crate::model::{
    AllocationCandidates, ConsumerAllocations, Inventories, Inventory, MICROVERSION, Provider,
    ProviderAllocations, Traits,
};
use crate::{Error, tls};

/// The largest answer read: allocation candidates for a large cloud run to a few MiB; a server
/// sending more is not Placement, and must not exhaust the agent's memory.
pub const BODY_LIMIT: u64 = 16 * 1024 * 1024;

/// How to reach Placement.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Placement's URL (`http://controller:8778`); `None` with [`Auth::Keystone`]: the catalog's.
    pub endpoint: Option<String>,
    /// The token to send, or how to get one.
    pub auth: Auth,
    /// PEM CA bundle trusted for https endpoints (and Keystone) instead of the webpki roots.
    pub ca_file: Option<PathBuf>,
    /// The limit for each request, from connecting to the last byte of the answer.
    pub timeout: Duration,
}

/// A blocking Placement client; clones share the connection pool and the Keystone token.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

// By hand: the session holds credentials, and the agent nothing worth printing.
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

struct Inner {
    agent: ureq::Agent,
    session: Session,
    endpoint: Option<String>,
}

#[derive(Clone, Copy, Debug)]
enum Method {
    Get,
    Put,
    Post,
    Delete,
}

/// A 2xx answer's body.
struct Reply {
    body: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct ProviderList {
    resource_providers: Vec<Provider>,
}

impl Client {
    /// A client for `config`; checks the configuration (URLs, CA file, timeout) but does not
    /// connect.
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let endpoint = config.endpoint.as_deref().map(checked_url).transpose()?;
        match &config.auth {
            Auth::NoAuth { token } | Auth::Token { token } if token.is_empty() => {
                return Err(Error::Config("the token is empty".into()));
            }
            Auth::NoAuth { .. } | Auth::Token { .. } if endpoint.is_none() => {
                return Err(Error::Config(
                    "no Placement endpoint: set one, or use Keystone to find it in the catalog"
                        .into(),
                ));
            }
            Auth::Keystone(creds) => {
                checked_url(&creds.auth_url)?;
            }
            _ => {}
        }
        if config.timeout.is_zero() {
            return Err(Error::Config("the request timeout is zero".into()));
        }
        let agent_config = ureq::Agent::config_builder()
            // Statuses are Placement's answers, read here, not transport errors.
            .http_status_as_error(false)
            .timeout_global(Some(config.timeout))
            // Placement never redirects; a redirect would carry the token elsewhere.
            .max_redirects(0)
            .user_agent(concat!("vgpud-placement/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls::config(config.ca_file.as_deref())?)
            .build();
        Ok(Client {
            inner: Arc::new(Inner {
                agent: ureq::Agent::new_with_config(agent_config),
                session: Session::new(config.auth),
                endpoint,
            }),
        })
    }

    /// Placement's URL: the configured one, else the catalog's (authenticating to learn it).
    pub fn endpoint(&self) -> Result<String, Error> {
        let creds = self.inner.session.credentials(&self.inner.agent)?;
        self.base(&creds)
    }

    /// The provider named `name` (`GET /resource_providers?name=`), if there is one.
    pub fn provider_named(&self, name: &str) -> Result<Option<Provider>, Error> {
        let list: ProviderList = self.get("/resource_providers", &[("name", name)])?;
        Ok(list.resource_providers.into_iter().next())
    }

    /// The provider `uuid`, if there is one.
    pub fn provider(&self, uuid: Uuid) -> Result<Option<Provider>, Error> {
        match self.get(&format!("/resource_providers/{uuid}"), &[]) {
            Ok(provider) => Ok(Some(provider)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every provider in the tree of `root` (`?in_tree=`), root included.
    pub fn tree(&self, root: Uuid) -> Result<Vec<Provider>, Error> {
        let root = root.to_string();
        let list: ProviderList = self.get("/resource_providers", &[("in_tree", &root)])?;
        Ok(list.resource_providers)
    }

    /// Creates a provider (a random UUID when `uuid` is `None`), nested under `parent`.
    pub fn create_provider(
        &self,
        name: &str,
        uuid: Option<Uuid>,
        parent: Option<Uuid>,
    ) -> Result<Provider, Error> {
        let mut body = json!({ "name": name });
        if let Some(uuid) = uuid {
            body["uuid"] = json!(uuid);
        }
        if let Some(parent) = parent {
            body["parent_provider_uuid"] = json!(parent);
        }
        // From 1.20 the answer is the provider itself.
        self.write(Method::Post, "/resource_providers", &body)
    }

    /// Deletes a provider; 409 while it has allocations or children.
    pub fn delete_provider(&self, uuid: Uuid) -> Result<(), Error> {
        self.send(
            Method::Delete,
            &format!("/resource_providers/{uuid}"),
            &[],
            None,
        )
        .map(drop)
    }

    /// The provider's inventories and generation.
    pub fn inventories(&self, uuid: Uuid) -> Result<Inventories, Error> {
        self.get(&format!("/resource_providers/{uuid}/inventories"), &[])
    }

    /// Replaces all the provider's inventories, if its generation is still `generation`.
    pub fn set_inventories(
        &self,
        uuid: Uuid,
        generation: u64,
        inventories: &BTreeMap<String, Inventory>,
    ) -> Result<Inventories, Error> {
        let body = json!({
            "resource_provider_generation": generation,
            "inventories": inventories,
        });
        self.write(
            Method::Put,
            &format!("/resource_providers/{uuid}/inventories"),
            &body,
        )
    }

    /// The provider's traits and generation.
    pub fn traits(&self, uuid: Uuid) -> Result<Traits, Error> {
        self.get(&format!("/resource_providers/{uuid}/traits"), &[])
    }

    /// Replaces all the provider's traits, if its generation is still `generation`.
    pub fn set_traits(
        &self,
        uuid: Uuid,
        generation: u64,
        traits: &[String],
    ) -> Result<Traits, Error> {
        let body = json!({ "resource_provider_generation": generation, "traits": traits });
        self.write(
            Method::Put,
            &format!("/resource_providers/{uuid}/traits"),
            &body,
        )
    }

    /// Makes sure the trait exists: a `CUSTOM_` one is created (`PUT /traits/{name}`, 201 or
    /// 204); a standard one (os-traits) cannot be, and is only checked (`GET`, 404 when there
    /// is no such trait).
    pub fn ensure_trait(&self, name: &str) -> Result<(), Error> {
        self.ensure_named("/traits", name)
    }

    /// Makes sure the resource class exists: a `CUSTOM_` one is created
    /// (`PUT /resource_classes/{name}`, 1.7); a standard one (`VGPU`, `PGPU`) is only checked.
    pub fn ensure_resource_class(&self, name: &str) -> Result<(), Error> {
        self.ensure_named("/resource_classes", name)
    }

    /// The consumer's allocations (empty when it holds none).
    pub fn consumer_allocations(&self, consumer: Uuid) -> Result<ConsumerAllocations, Error> {
        self.get(&format!("/allocations/{consumer}"), &[])
    }

    /// Replaces the consumer's allocations (`consumer_generation` `None` for a new consumer;
    /// `project_id`, `user_id` and, from 1.38, `consumer_type` are required by Placement).
    pub fn put_consumer_allocations(
        &self,
        consumer: Uuid,
        body: &ConsumerAllocations,
    ) -> Result<(), Error> {
        // Placement's PUT schema takes only `resources` per provider: the generations a GET
        // returns are dropped, so a document read can be written back.
        let allocations: BTreeMap<Uuid, _> = body
            .allocations
            .iter()
            .map(|(rp, a)| (*rp, json!({ "resources": a.resources })))
            .collect();
        let document = json!({
            "allocations": allocations,
            "consumer_generation": body.consumer_generation,
            "project_id": body.project_id,
            "user_id": body.user_id,
            "consumer_type": body.consumer_type,
        });
        self.send(
            Method::Put,
            &format!("/allocations/{consumer}"),
            &[],
            Some(encode(&document)?),
        )
        .map(drop)
    }

    /// Deletes all the consumer's allocations; [`Error::NotFound`] when it holds none.
    pub fn delete_consumer_allocations(&self, consumer: Uuid) -> Result<(), Error> {
        self.send(
            Method::Delete,
            &format!("/allocations/{consumer}"),
            &[],
            None,
        )
        .map(drop)
    }

    /// The allocations against one provider, by consumer.
    pub fn provider_allocations(&self, uuid: Uuid) -> Result<ProviderAllocations, Error> {
        self.get(&format!("/resource_providers/{uuid}/allocations"), &[])
    }

    /// `GET /allocation_candidates` with `query` as given (`resources`, `required`,
    /// `resources_A`, `same_subtree`, `limit`, …).
    pub fn allocation_candidates(
        &self,
        query: &[(&str, &str)],
    ) -> Result<AllocationCandidates, Error> {
        self.get("/allocation_candidates", query)
    }

    fn ensure_named(&self, collection: &str, name: &str) -> Result<(), Error> {
        let path = format!("{collection}/{}", path_segment(name));
        let method = if name.starts_with("CUSTOM_") {
            Method::Put
        } else {
            Method::Get
        };
        self.send(method, &path, &[], None).map(drop)
    }

    fn get<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> Result<T, Error> {
        let reply = self.send(Method::Get, path, query, None)?;
        decode(&reply, path)
    }

    fn write<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, Error> {
        let reply = self.send(method, path, &[], Some(encode(body)?))?;
        decode(&reply, path)
    }

    /// Sends one request; a 401 with a Keystone token drops it and sends once more with a new
    /// one. A non-2xx answer is an [`Error`].
    fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Reply, Error> {
        let session = &self.inner.session;
        let mut retried = false;
        loop {
            let creds = session.credentials(&self.inner.agent)?;
            let url = format!("{}{path}", self.base(&creds)?);
            let (status, reply) =
                self.exchange(method, &url, &creds.token, query, body.as_deref())?;
            if status == 401 && !retried && session.can_reauthenticate() {
                tracing::debug!(%url, "Placement refused the Keystone token; fetching a new one");
                session.forget(&creds.token);
                retried = true;
                continue;
            }
            if (200..300).contains(&status) {
                return Ok(reply);
            }
            return Err(Error::from_status(status, &reply.body));
        }
    }

    fn exchange(
        &self,
        method: Method,
        url: &str,
        token: &str,
        query: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<(u16, Reply), Error> {
        let agent = &self.inner.agent;
        let sent = match (method, body) {
            (Method::Get, _) => headers(agent.get(url), token, query).call(),
            (Method::Delete, _) => headers(agent.delete(url), token, query).call(),
            (Method::Put, None) => headers(agent.put(url), token, query).send_empty(),
            (Method::Post, None) => headers(agent.post(url), token, query).send_empty(),
            (Method::Put, Some(b)) => headers(agent.put(url), token, query)
                .header("Content-Type", "application/json")
                .send(b),
            (Method::Post, Some(b)) => headers(agent.post(url), token, query)
                .header("Content-Type", "application/json")
                .send(b),
        };
        let mut response = sent.map_err(|e| transport_error(url, e))?;
        let status = response.status().as_u16();
        let body = read_capped(&mut response)?;
        tracing::trace!(?method, %url, status, "Placement answered");
        Ok((status, Reply { body }))
    }

    fn base(&self, creds: &Credentials) -> Result<String, Error> {
        if let Some(endpoint) = &self.inner.endpoint {
            return Ok(endpoint.clone());
        }
        match &creds.catalog_endpoint {
            Some(url) => checked_url(url),
            None => Err(Error::Config(
                "Keystone's catalog has no placement endpoint for the configured interface and \
                 region: set the endpoint, or the region and interface the catalog lists"
                    .into(),
            )),
        }
    }
}

/// The headers every Placement request carries.
fn headers<B>(
    request: ureq::RequestBuilder<B>,
    token: &str,
    query: &[(&str, &str)],
) -> ureq::RequestBuilder<B> {
    request
        .header("OpenStack-API-Version", format!("placement {MICROVERSION}"))
        .header("Accept", "application/json")
        .header("X-Auth-Token", token)
        .query_pairs(query.iter().copied())
}

fn encode(body: &impl Serialize) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(body).map_err(|e| Error::Config(format!("a request cannot be encoded: {e}")))
}

fn decode<T: DeserializeOwned>(reply: &Reply, path: &str) -> Result<T, Error> {
    serde_json::from_slice(&reply.body).map_err(|e| Error::BadResponse(format!("{path}: {e}")))
}

/// `url` without a trailing `/`, if it is an http(s) URL with a host and no query.
fn checked_url(url: &str) -> Result<String, Error> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !url.contains(['?', '#']) => {
            Ok(url.trim_end_matches('/').to_owned())
        }
        _ => Err(Error::Config(format!(
            "{url:?} is not an http:// or https:// URL with a host"
        ))),
    }
}

/// `name` percent-encoded for a URL path segment: trait and class names are `[A-Z0-9_]`, but
/// one from a configuration file must not change the path.
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The body of `response`, at most [`BODY_LIMIT`] bytes.
pub(crate) fn read_capped(
    response: &mut ureq::http::Response<ureq::Body>,
) -> Result<Vec<u8>, Error> {
    response
        .body_mut()
        .with_config()
        .limit(BODY_LIMIT)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => Error::BadResponse(format!(
                "an answer larger than {} MiB",
                BODY_LIMIT / (1024 * 1024)
            )),
            other => Error::Unavailable(format!("reading the answer failed: {other}")),
        })
}

/// A request that got no HTTP answer: Placement (or Keystone) is down, unreachable, too slow,
/// or not who the CA bundle says.
pub(crate) fn transport_error(url: &str, e: ureq::Error) -> Error {
    match e {
        ureq::Error::Timeout(_) => Error::Unavailable(format!("{url}: no answer in time ({e})")),
        ureq::Error::BadUri(_) => Error::Config(format!("{url}: {e}")),
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => Error::Unavailable(
            format!("{url}: TLS failed ({e}); a private CA needs ca_file"),
        ),
        // rustls reports a refused certificate from inside the stream as InvalidData.
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => Error::Unavailable(
            format!("{url}: TLS failed ({io}); a private CA needs ca_file"),
        ),
        other => Error::Unavailable(format!("{url}: {other}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(endpoint: Option<&str>, auth: Auth) -> ClientConfig {
        ClientConfig {
            endpoint: endpoint.map(str::to_owned),
            auth,
            ca_file: None,
            timeout: Duration::from_secs(1),
        }
    }

    fn admin() -> Auth {
        Auth::NoAuth {
            token: "admin".into(),
        }
    }

    #[test]
    fn urls_are_checked_and_trimmed() {
        assert_eq!(checked_url("http://c:8778/").unwrap(), "http://c:8778");
        assert_eq!(
            checked_url("https://c/placement").unwrap(),
            "https://c/placement"
        );
        for bad in [
            "",
            "c:8778",
            "ftp://c",
            "http://",
            "http:///x",
            "http://c/?a=1",
        ] {
            assert!(matches!(checked_url(bad), Err(Error::Config(_))), "{bad}");
        }
    }

    #[test]
    fn a_static_token_needs_an_endpoint() {
        let err = Client::new(config(None, admin())).err().unwrap();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("endpoint")),
            "{err}"
        );
        let err = Client::new(config(
            Some("http://c"),
            Auth::Token {
                token: String::new(),
            },
        ))
        .err()
        .unwrap();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("empty")),
            "{err}"
        );
    }

    #[test]
    fn a_zero_timeout_is_refused() {
        let mut cfg = config(Some("http://c"), admin());
        cfg.timeout = Duration::ZERO;
        assert!(matches!(Client::new(cfg), Err(Error::Config(_))));
    }

    #[test]
    fn nothing_listening_is_unavailable() {
        // A port just released: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client =
            Client::new(config(Some(&format!("http://127.0.0.1:{port}")), admin())).unwrap();
        let err = client.provider_named("x").unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");
    }

    #[test]
    fn a_server_that_never_answers_times_out_as_unavailable() {
        // Accepts the connection (the kernel's backlog) and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut cfg = config(Some(&url), admin());
        cfg.timeout = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let err = Client::new(cfg).unwrap().provider_named("x").unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(listener);
    }

    #[test]
    fn a_server_sending_too_much_is_cut_off() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hostile = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            let huge = BODY_LIMIT + 1024 * 1024;
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {huge}\r\n\r\n[");
            let _ = conn.write_all(head.as_bytes());
            let chunk = vec![b' '; 64 * 1024];
            // Until the client hangs up.
            while conn.write_all(&chunk).is_ok() {}
        });
        let mut cfg = config(Some(&url), admin());
        cfg.timeout = Duration::from_secs(30);
        let err = Client::new(cfg).unwrap().provider_named("x").unwrap_err();
        assert!(
            matches!(&err, Error::BadResponse(m) if m.contains("larger than 16 MiB")),
            "{err:?}"
        );
        hostile.join().unwrap();
    }

    #[test]
    fn path_segments_cannot_escape() {
        assert_eq!(path_segment("CUSTOM_A1"), "CUSTOM_A1");
        assert_eq!(path_segment("../x?y"), "..%2Fx%3Fy");
    }
}
