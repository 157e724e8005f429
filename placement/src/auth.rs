//! Which token goes in `X-Auth-Token`, and where Placement is when Keystone's catalog says.
//!
//! - `noauth2` (Placement's test mode): the configured token as is (`admin` for the admin role);
//! - a fixed Keystone token: sent as is, never refreshed (its owner renews it);
//! - the Keystone password flow: a token is fetched on first use, cached, fetched again
//!   [`REFRESH_BEFORE`] before it expires, and dropped when Placement answers 401 (revoked,
//!   Keystone restarted with new fernet keys) so that the request is retried once with a new one.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::Error;
use crate::client::{read_capped, transport_error};
use crate::keystone;

/// How long before a Keystone token's `expires_at` a new one is fetched: a request sent with a
/// token about to expire may reach Placement after it has (keystonemiddleware checks expiry
/// with no grace), and clocks differ.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(60);

/// How the client proves who it is to Placement.
#[derive(Clone)]
pub enum Auth {
    /// Placement's `noauth2` strategy: `token` is sent as is (`admin` gets the admin role).
    NoAuth {
        /// The token to send.
        token: String,
    },
    /// A Keystone token obtained elsewhere; a 401 is final.
    Token {
        /// The token to send.
        token: String,
    },
    /// Keystone's password flow with service credentials.
    Keystone(KeystonePassword),
}

/// Service credentials for Keystone's password flow, and which catalog endpoint to use.
#[derive(Clone, PartialEq, Eq)]
pub struct KeystonePassword {
    /// Keystone's URL, e.g. `https://keystone:5000/v3`.
    pub auth_url: String,
    /// The service user.
    pub username: String,
    /// Its password.
    pub password: String,
    /// The user's domain, e.g. `Default`.
    pub user_domain_name: String,
    /// The project the token is scoped to, e.g. `service`.
    pub project_name: String,
    /// The project's domain.
    pub project_domain_name: String,
    /// The catalog region to take Placement's endpoint from; `None`: any.
    pub region: Option<String>,
    /// The catalog interface: `internal`, `public` or `admin`.
    pub interface: String,
}

// Hand-written so that a logged configuration never shows a password or a token.
impl fmt::Debug for KeystonePassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeystonePassword")
            .field("auth_url", &self.auth_url)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("user_domain_name", &self.user_domain_name)
            .field("project_name", &self.project_name)
            .field("project_domain_name", &self.project_domain_name)
            .field("region", &self.region)
            .field("interface", &self.interface)
            .finish()
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::NoAuth { token } => f
                .debug_struct("NoAuth")
                .field("token", &redacted(token))
                .finish(),
            Auth::Token { .. } => f
                .debug_struct("Token")
                .field("token", &"<redacted>")
                .finish(),
            Auth::Keystone(creds) => f.debug_tuple("Keystone").field(creds).finish(),
        }
    }
}

/// noauth2 tokens are role names (`admin`), not secrets; anything longer may be a real token.
fn redacted(token: &str) -> &str {
    if token.len() <= 16 {
        token
    } else {
        "<redacted>"
    }
}

/// The token to send now, and Placement's URL when Keystone's catalog gave one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub token: String,
    pub catalog_endpoint: Option<String>,
}

/// A cached Keystone token.
struct Cached {
    credentials: Credentials,
    refresh_at: Instant,
}

/// The authentication state of one client (shared by its clones).
pub(crate) struct Session {
    auth: Auth,
    cache: Mutex<Option<Cached>>,
}

impl Session {
    pub(crate) fn new(auth: Auth) -> Session {
        Session {
            auth,
            cache: Mutex::new(None),
        }
    }

    /// Whether a 401 may be cured by fetching a new token.
    pub(crate) fn can_reauthenticate(&self) -> bool {
        matches!(self.auth, Auth::Keystone(_))
    }

    /// The token to send (fetching one from Keystone when none is cached or it is due for
    /// refresh).
    pub(crate) fn credentials(&self, agent: &ureq::Agent) -> Result<Credentials, Error> {
        let creds = match &self.auth {
            Auth::NoAuth { token } | Auth::Token { token } => {
                return Ok(Credentials {
                    token: token.clone(),
                    catalog_endpoint: None,
                });
            }
            Auth::Keystone(creds) => creds,
        };
        // Held across the Keystone request: concurrent callers wait for one token instead of
        // each fetching their own.
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = cache.as_ref()
            && Instant::now() < cached.refresh_at
        {
            return Ok(cached.credentials.clone());
        }
        let issued = fetch_token(agent, creds)?;
        let left = issued
            .expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let credentials = Credentials {
            token: issued.token,
            catalog_endpoint: issued.placement_url,
        };
        *cache = Some(Cached {
            credentials: credentials.clone(),
            refresh_at: Instant::now() + left.saturating_sub(REFRESH_BEFORE),
        });
        tracing::debug!(valid_s = left.as_secs(), "Keystone issued a token");
        Ok(credentials)
    }

    /// Drops `token` from the cache (Placement refused it), unless another caller already
    /// replaced it.
    pub(crate) fn forget(&self, token: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.as_ref().is_some_and(|c| c.credentials.token == token) {
            *cache = None;
        }
    }
}

/// `POST {auth_url}/v3/auth/tokens` with the password flow.
fn fetch_token(
    agent: &ureq::Agent,
    creds: &KeystonePassword,
) -> Result<keystone::IssuedToken, Error> {
    let url = keystone::tokens_url(&creds.auth_url);
    let body = serde_json::to_vec(&keystone::password_request(creds))
        .map_err(|e| Error::Config(format!("the Keystone request cannot be encoded: {e}")))?;
    let mut response = agent
        .post(&url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .send(&body)
        .map_err(|e| transport_error(&url, e))?;
    let status = response.status().as_u16();
    let subject = response
        .headers()
        .get("X-Subject-Token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = read_capped(&mut response)?;
    match status {
        200..=299 => keystone::read_issued(subject.as_deref(), &body, creds),
        401 | 403 => Err(Error::Auth(format!(
            "Keystone at {url} refused user {:?} in domain {:?} for project {:?} (HTTP {status})",
            creds.username, creds.user_domain_name, creds.project_name
        ))),
        _ => match Error::from_status(status, &body) {
            unavailable @ Error::Unavailable(_) => Err(unavailable),
            other => Err(Error::Auth(format!("Keystone at {url}: {other}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_secrets() {
        let auth = Auth::Keystone(KeystonePassword {
            auth_url: "http://k/v3".into(),
            username: "vgpud".into(),
            password: "hunter2".into(),
            user_domain_name: "Default".into(),
            project_name: "service".into(),
            project_domain_name: "Default".into(),
            region: None,
            interface: "internal".into(),
        });
        assert!(!format!("{auth:?}").contains("hunter2"));
        let token = Auth::Token {
            token: "gAAAAABsecret".into(),
        };
        assert!(!format!("{token:?}").contains("gAAAAABsecret"));
        let noauth = Auth::NoAuth {
            token: "admin".into(),
        };
        assert!(format!("{noauth:?}").contains("admin"));
    }
}
