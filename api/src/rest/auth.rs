//! Who is calling: the identity a listener attaches to each request, bearer tokens, and the
//! certificate-subject allow-list.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use axum::extract::Request;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The authenticated caller of a request, attached by the listener that accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A process on the unix socket (the socket's mode and group decide who may connect).
    Unix {
        /// Its user id.
        uid: u32,
        /// Its group id.
        gid: u32,
        /// Its process id, when the kernel reports it.
        pid: Option<i32>,
    },
    /// A TLS client with a certificate from the client CA and an allowed subject.
    Certificate {
        /// The certificate's subject (`CN=nova-compute, O=Example`).
        subject: String,
    },
    /// A TLS client with a bearer token from the tokens file.
    Token {
        /// The token's name in the file.
        name: String,
    },
    /// A caller the embedding server vouches for (a loopback test server, say).
    Local {
        /// What vouches for it.
        what: String,
    },
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Unix { uid, gid, pid } => {
                write!(f, "unix uid={uid} gid={gid}")?;
                if let Some(pid) = pid {
                    write!(f, " pid={pid}")?;
                }
                Ok(())
            }
            Caller::Certificate { subject } => write!(f, "certificate {subject:?}"),
            Caller::Token { name } => write!(f, "token {name:?}"),
            Caller::Local { what } => write!(f, "local ({what})"),
        }
    }
}

/// Refuses mutating requests that carry no [`Caller`]: nothing mutating is anonymous, whatever
/// server the router ends up in. Mutations are logged with the caller (an audit trail; their rate
/// is bounded by the work they do).
pub(super) async fn require_caller(req: Request, next: Next) -> Response {
    let reading = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if reading {
        return next.run(req).await;
    }
    let Some(caller) = req.extensions().get::<Caller>().cloned() else {
        return ApiError::Unauthenticated(
            "this request changes state and the connection carries no identity".into(),
        )
        .into_response();
    };
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let response = next.run(req).await;
    tracing::info!(%caller, %method, path, status = response.status().as_u16(), "API change");
    response
}

/// Bearer tokens read from a file: one per line, `NAME TOKEN` or just `TOKEN` (then named by its
/// line number); blank lines and lines starting with `#` are ignored.
///
/// Clones share one set of tokens, which [`TokenFile::reload`] (and [`reload_token_files`], on
/// SIGHUP) replaces in place: a token removed from the file stops working without a restart.
#[derive(Clone)]
pub struct TokenFile {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    tokens: RwLock<Vec<(String, Vec<u8>)>>,
}

/// Every tokens file [`TokenFile::load`] opened in this process, for [`reload_token_files`]. The
/// TLS listener loads its own file from its options; this is how a SIGHUP reaches it.
static LOADED: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("TokenFile")
            .field("path", &self.shared.path)
            .field("tokens", &self.read().len())
            .finish()
    }
}

/// Shortest token accepted: guessing must be hopeless.
pub const MIN_TOKEN_LEN: usize = 16;

impl TokenFile {
    /// Reads and checks a tokens file; [`reload_token_files`] re-reads it from now on.
    pub fn load(path: &Path) -> Result<TokenFile, String> {
        let file = Self::parse(&read_tokens(path)?, path)?;
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.retain(|w| w.strong_count() > 0);
        loaded.push(Arc::downgrade(&file.shared));
        Ok(file)
    }

    /// Parses a tokens file's text.
    pub fn parse(text: &str, path: &Path) -> Result<TokenFile, String> {
        Ok(TokenFile {
            shared: Arc::new(Shared {
                path: path.to_owned(),
                tokens: RwLock::new(parse_tokens(text, path)?),
            }),
        })
    }

    /// The file the tokens come from.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Re-reads the file and replaces the tokens (returns how many there are now). A file that
    /// cannot be read or parsed changes nothing: the tokens in use stay.
    pub fn reload(&self) -> Result<usize, String> {
        let tokens = parse_tokens(&read_tokens(&self.shared.path)?, &self.shared.path)?;
        let n = tokens.len();
        *self
            .shared
            .tokens
            .write()
            .unwrap_or_else(PoisonError::into_inner) = tokens;
        Ok(n)
    }

    /// The name of the token presented, when it is one of the file's.
    pub fn check(&self, presented: &str) -> Option<String> {
        // Compare every token in full, so the time taken says nothing about near misses.
        let mut found = None;
        for (name, token) in self.read().iter() {
            if constant_time_eq(token, presented.as_bytes()) {
                found = Some(name.clone());
            }
        }
        found
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<(String, Vec<u8>)>> {
        self.shared
            .tokens
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Re-reads every tokens file loaded in this process (the daemon's SIGHUP): per file, how many
/// tokens it now has, or why it was not reloaded (then its old tokens stay in force).
pub fn reload_token_files() -> Vec<(PathBuf, Result<usize, String>)> {
    let live: Vec<Arc<Shared>> = {
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.retain(|w| w.strong_count() > 0);
        loaded.iter().filter_map(Weak::upgrade).collect()
    };
    live.into_iter()
        .map(|shared| {
            let path = shared.path.clone();
            (path, TokenFile { shared }.reload())
        })
        .collect()
}

fn read_tokens(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the tokens file {}: {e}", path.display()))
}

fn parse_tokens(text: &str, path: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (name, token) = match (words.next(), words.next(), words.next()) {
            (Some(t), None, _) => (format!("line {}", i + 1), t),
            (Some(n), Some(t), None) => (n.to_owned(), t),
            _ => {
                return Err(format!(
                    "{} line {}: expected NAME TOKEN or TOKEN",
                    path.display(),
                    i + 1
                ));
            }
        };
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "{} line {}: a token must have at least {MIN_TOKEN_LEN} characters",
                path.display(),
                i + 1
            ));
        }
        tokens.push((name, token.as_bytes().to_vec()));
    }
    if tokens.is_empty() {
        return Err(format!("{} holds no token", path.display()));
    }
    Ok(tokens)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a certificate subject matches an allow-list entry (`CN=nova-compute` or
/// `CN=nova-compute,O=Example`; the rules are [`agent::subject_rule::SubjectRule`]'s: attribute
/// names case-insensitive, values exact, and every value of a named attribute must be named). A
/// malformed entry matches nothing: the daemon refuses one at start-up, and any other embedder
/// fails closed.
pub fn subject_matches(entry: &str, subject: &[(String, String)]) -> bool {
    agent::subject_rule::SubjectRule::parse(entry).is_ok_and(|rule| rule.matches(subject))
}

/// How a TLS listener authenticates requests.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Bearer tokens accepted, when a tokens file is configured.
    pub tokens: Option<TokenFile>,
    /// Client certificates are checked against a CA; these subjects are allowed (empty: any
    /// certificate the CA signed).
    pub allowed_subjects: Vec<String>,
    /// Whether client certificates are in use at all.
    pub certificates: bool,
}

/// The identity of a TLS peer, as the handshake established it.
#[derive(Debug, Clone)]
pub(super) struct TlsPeer {
    pub addr: std::net::SocketAddr,
    /// The verified client certificate's subject: (attribute, value) pairs and the display form.
    pub subject: Option<(Vec<(String, String)>, String)>,
}

impl Credentials {
    /// Decides who is calling, from the certificate and the `Authorization` header.
    pub(super) fn authenticate(
        &self,
        peer: &TlsPeer,
        authorization: Option<&str>,
    ) -> Result<Caller, ApiError> {
        if let Some(value) = authorization {
            let Some(tokens) = &self.tokens else {
                return Err(ApiError::Unauthenticated(
                    "bearer tokens are not accepted on this listener".into(),
                ));
            };
            let token = value.strip_prefix("Bearer ").ok_or_else(|| {
                ApiError::Unauthenticated("expected Authorization: Bearer TOKEN".into())
            })?;
            return match tokens.check(token.trim()) {
                Some(name) => Ok(Caller::Token { name }),
                None => Err(ApiError::Unauthenticated(
                    "the bearer token is not valid".into(),
                )),
            };
        }
        match &peer.subject {
            Some((pairs, shown)) => {
                let allowed = self.allowed_subjects.is_empty()
                    || self
                        .allowed_subjects
                        .iter()
                        .any(|e| subject_matches(e, pairs));
                if allowed {
                    Ok(Caller::Certificate {
                        subject: shown.clone(),
                    })
                } else {
                    Err(ApiError::Forbidden(format!(
                        "the client certificate {shown:?} is not in the allowed subjects"
                    )))
                }
            }
            None => Err(ApiError::Unauthenticated(
                "present a client certificate or an Authorization: Bearer token".into(),
            )),
        }
    }
}

/// The `Authorization` header as text, when present.
pub(super) fn authorization(req: &Request) -> Result<Option<&str>, ApiError> {
    req.headers()
        .get(header::AUTHORIZATION)
        .map(|v| {
            v.to_str().map_err(|_| {
                ApiError::Unauthenticated("the Authorization header is not text".into())
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Vec<(String, String)> {
        vec![
            ("CN".into(), "nova-compute".into()),
            ("O".into(), "Example".into()),
        ]
    }

    #[test]
    fn subjects_match_by_their_listed_attributes() {
        assert!(subject_matches("CN=nova-compute", &subject()));
        assert!(subject_matches("cn=nova-compute, O=Example", &subject()));
        assert!(!subject_matches("CN=nova", &subject()));
        assert!(!subject_matches("CN=nova-compute,O=Other", &subject()));
        assert!(!subject_matches("", &subject()));
        // Malformed entries admit nothing (they used to be read as what was left of them).
        assert!(!subject_matches("CN=nova-compute,O:Example", &subject()));
        let mut two = subject();
        two.push(("CN".into(), "admin".into()));
        assert!(!subject_matches("CN=nova-compute", &two));
        assert!(subject_matches("CN=nova-compute,CN=admin", &two));
    }

    #[test]
    fn token_files_name_their_tokens_and_refuse_short_ones() {
        let p = Path::new("/etc/vgpud/tokens");
        let t =
            TokenFile::parse("# c\nnova 0123456789abcdef0123\n\nfedcba9876543210xyz\n", p).unwrap();
        assert_eq!(t.check("0123456789abcdef0123").as_deref(), Some("nova"));
        assert_eq!(t.check("fedcba9876543210xyz").as_deref(), Some("line 4"));
        assert_eq!(t.check("0123456789abcdef012"), None);
        assert!(TokenFile::parse("short\n", p).is_err());
        assert!(TokenFile::parse("a b c\n", p).is_err());
        assert!(TokenFile::parse("# only comments\n", p).is_err());
        assert!(!format!("{t:?}").contains("0123456789"));
    }

    #[test]
    fn a_reload_replaces_the_tokens_and_a_bad_file_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "old 0123456789abcdef-old\n").unwrap();
        let t = TokenFile::load(&path).unwrap();
        let listener = t.clone();
        assert_eq!(
            listener.check("0123456789abcdef-old").as_deref(),
            Some("old")
        );
        std::fs::write(&path, "new 0123456789abcdef-new\n").unwrap();
        let reloaded = reload_token_files();
        let mine = reloaded.iter().find(|(p, _)| *p == path).unwrap();
        assert_eq!(mine.1, Ok(1));
        assert_eq!(listener.check("0123456789abcdef-old"), None, "removed");
        assert_eq!(
            listener.check("0123456789abcdef-new").as_deref(),
            Some("new")
        );
        // A file that does not parse keeps the tokens in force and says why.
        std::fs::write(&path, "new short\n").unwrap();
        let why = t.reload().unwrap_err();
        assert!(why.contains("line 1"), "{why}");
        assert_eq!(
            listener.check("0123456789abcdef-new").as_deref(),
            Some("new")
        );
        std::fs::remove_file(&path).unwrap();
        assert!(t.reload().is_err());
        assert_eq!(
            listener.check("0123456789abcdef-new").as_deref(),
            Some("new")
        );
    }
}
