//! Keystone's password flow (Identity API v3, "Password authentication with scoped
//! authorization", <https://docs.openstack.org/api-ref/identity/v3/#authentication-and-token-management>):
//! `POST /v3/auth/tokens` with the user's name, domain and password scoped to a project; the
//! token comes back in the `X-Subject-Token` header, its expiry and the service catalog in the
//! body. This module builds the request body and reads the answer; it does no I/O.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::json;

use crate::Error;
use crate::auth::KeystonePassword;

/// The catalog service type Placement registers under (`openstack service create --name
/// placement placement`, Placement's install guide).
pub const PLACEMENT_SERVICE_TYPE: &str = "placement";

/// `POST` here to get a token: `auth_url` with `/v3` added when it does not end in it (devstack
/// serves Keystone at `http://host/identity`, its v3 API at `/identity/v3`).
pub(crate) fn tokens_url(auth_url: &str) -> String {
    let base = auth_url.trim_end_matches('/');
    if base.ends_with("/v3") {
        format!("{base}/auth/tokens")
    } else {
        format!("{base}/v3/auth/tokens")
    }
}

/// The request body of the password flow, scoped to the configured project.
pub(crate) fn password_request(creds: &KeystonePassword) -> serde_json::Value {
    json!({
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {
                    "user": {
                        "name": creds.username,
                        "domain": { "name": creds.user_domain_name },
                        "password": creds.password,
                    }
                }
            },
            "scope": {
                "project": {
                    "name": creds.project_name,
                    "domain": { "name": creds.project_domain_name },
                }
            }
        }
    })
}

/// What a successful `POST /v3/auth/tokens` gave: the token, when it expires, and Placement's
/// URL from the catalog (when the catalog has one matching the interface and region).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssuedToken {
    pub token: String,
    pub expires_at: SystemTime,
    pub placement_url: Option<String>,
}

#[derive(Deserialize)]
struct TokenDocument {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    expires_at: String,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
struct Endpoint {
    interface: String,
    url: String,
    /// `region_id` since v3.2; `region` is the deprecated name, still sent.
    #[serde(default)]
    region_id: Option<String>,
    #[serde(default)]
    region: Option<String>,
}

/// Reads Keystone's answer: `subject_token` from the `X-Subject-Token` header, `body` the JSON
/// document.
pub(crate) fn read_issued(
    subject_token: Option<&str>,
    body: &[u8],
    creds: &KeystonePassword,
) -> Result<IssuedToken, Error> {
    let token = subject_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Auth("Keystone's answer has no X-Subject-Token header".into()))?;
    let doc: TokenDocument = serde_json::from_slice(body)
        .map_err(|e| Error::BadResponse(format!("Keystone's token document: {e}")))?;
    let expires_at = parse_timestamp(&doc.token.expires_at).ok_or_else(|| {
        Error::BadResponse(format!(
            "Keystone's token expires_at {:?} is not an ISO 8601 time",
            doc.token.expires_at
        ))
    })?;
    Ok(IssuedToken {
        token: token.to_owned(),
        expires_at,
        placement_url: placement_url(&doc.token.catalog, creds),
    })
}

/// The first `placement` endpoint with the configured interface, in the configured region
/// (any region when none is configured).
fn placement_url(catalog: &[CatalogEntry], creds: &KeystonePassword) -> Option<String> {
    catalog
        .iter()
        .filter(|entry| entry.kind == PLACEMENT_SERVICE_TYPE)
        .flat_map(|entry| &entry.endpoints)
        .find(|ep| {
            ep.interface == creds.interface
                && creds.region.as_deref().is_none_or(|want| {
                    ep.region_id.as_deref() == Some(want) || ep.region.as_deref() == Some(want)
                })
        })
        .map(|ep| ep.url.trim_end_matches('/').to_owned())
}

/// `2015-11-06T15:32:17.893769Z` (Keystone's `utils.isotime(subsecond=True)`), also with a
/// numeric offset (`+01:00`) or without fractions.
pub(crate) fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let (date, rest) = text.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (clock, offset_s) = split_offset(rest)?;
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, f)) => (hms, f),
        None => (clock, ""),
    };
    let mut parts = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hour, minute, second) = (parts.next()??, parts.next()??, parts.next()??);
    let valid = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..=60).contains(&second);
    if !valid || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{fraction:0<9}").get(..9)?.parse().ok()?;
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
}

/// The clock part and the offset from UTC in seconds: `Z`, `+hh:mm` or `-hh:mm`.
fn split_offset(rest: &str) -> Option<(&str, i64)> {
    if let Some(clock) = rest.strip_suffix('Z') {
        return Some((clock, 0));
    }
    let at = rest.rfind(['+', '-'])?;
    let (clock, offset) = rest.split_at(at);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let (h, m) = offset[1..].split_once(':')?;
    Some((
        clock,
        sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60),
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`,
/// <https://howardhinnant.github.io/date_algorithms.html>).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn creds(interface: &str, region: Option<&str>) -> KeystonePassword {
        KeystonePassword {
            auth_url: "http://keystone:5000/v3".into(),
            username: "vgpud".into(),
            password: "secret".into(),
            user_domain_name: "Default".into(),
            project_name: "service".into(),
            project_domain_name: "Default".into(),
            region: region.map(str::to_owned),
            interface: interface.into(),
        }
    }

    // The response body of "Password authentication with scoped authorization" in the Identity
    // v3 API reference (trimmed to the fields read here plus some it ignores), with a placement
    // entry in two regions as a multi-region cloud has.
    const ISSUED: &str = r#"{
      "token": {
        "methods": ["password"],
        "user": {"domain": {"id": "default", "name": "Default"}, "id": "ee4dfb6e5540447cb3741905149d9b6e", "name": "admin", "password_expires_at": null},
        "audit_ids": ["3T2dc1CGQxyJsHdDu1xkcw"],
        "expires_at": "2015-11-07T02:58:43.578887Z",
        "issued_at": "2015-11-07T01:58:43.578929Z",
        "project": {"domain": {"id": "default", "name": "Default"}, "id": "a6944d763bf64ee6a275f1263fae0352", "name": "admin"},
        "is_domain": false,
        "roles": [{"id": "51cc68287d524c759f47c811e6463340", "name": "admin"}],
        "catalog": [
          {"endpoints": [
             {"region_id": "RegionOne", "url": "http://23.253.248.171:5000/v3", "region": "RegionOne", "interface": "public", "id": "068d1b359ee84b438266cb736d81de97"}],
           "type": "identity", "id": "050726f278654128aba89757ae25950c", "name": "keystone"},
          {"endpoints": [
             {"region_id": "RegionOne", "url": "http://10.0.0.1:8778/", "region": "RegionOne", "interface": "public", "id": "p1"},
             {"region_id": "RegionOne", "url": "http://192.168.0.1:8778", "region": "RegionOne", "interface": "internal", "id": "p2"},
             {"region_id": "RegionTwo", "url": "http://192.168.2.1:8778", "region": "RegionTwo", "interface": "internal", "id": "p3"}],
           "type": "placement", "id": "p", "name": "placement"}
        ]
      }
    }"#;

    #[test]
    fn the_request_body_is_the_scoped_password_flow() {
        let body = password_request(&creds("internal", None));
        let user = &body["auth"]["identity"]["password"]["user"];
        assert_eq!(body["auth"]["identity"]["methods"], json!(["password"]));
        assert_eq!(user["name"], "vgpud");
        assert_eq!(user["password"], "secret");
        assert_eq!(user["domain"]["name"], "Default");
        assert_eq!(body["auth"]["scope"]["project"]["name"], "service");
        assert_eq!(
            body["auth"]["scope"]["project"]["domain"]["name"],
            "Default"
        );
    }

    #[test]
    fn the_token_expiry_and_placement_endpoint_are_read() {
        let issued = read_issued(
            Some("gAAAAABW"),
            ISSUED.as_bytes(),
            &creds("internal", None),
        )
        .unwrap();
        assert_eq!(issued.token, "gAAAAABW");
        assert_eq!(
            issued.expires_at,
            SystemTime::UNIX_EPOCH + Duration::new(1_446_865_123, 578_887_000)
        );
        assert_eq!(
            issued.placement_url.as_deref(),
            Some("http://192.168.0.1:8778")
        );
    }

    #[test]
    fn the_endpoint_matches_interface_and_region() {
        let pick = |interface, region| {
            read_issued(Some("t"), ISSUED.as_bytes(), &creds(interface, region))
                .unwrap()
                .placement_url
        };
        assert_eq!(
            pick("internal", Some("RegionTwo")).as_deref(),
            Some("http://192.168.2.1:8778")
        );
        assert_eq!(
            pick("public", Some("RegionOne")).as_deref(),
            Some("http://10.0.0.1:8778")
        );
        assert_eq!(pick("admin", None), None);
        assert_eq!(pick("internal", Some("RegionThree")), None);
    }

    #[test]
    fn an_answer_without_the_subject_token_is_an_auth_error() {
        let err = read_issued(None, ISSUED.as_bytes(), &creds("internal", None)).unwrap_err();
        assert!(matches!(err, Error::Auth(_)), "{err:?}");
    }

    #[test]
    fn a_body_without_a_token_is_a_bad_response() {
        let err = read_issued(Some("t"), b"{\"error\":{}}", &creds("internal", None)).unwrap_err();
        assert!(matches!(err, Error::BadResponse(_)), "{err:?}");
    }

    #[test]
    fn timestamps_in_keystones_forms_parse() {
        let epoch = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(epoch(0)));
        assert_eq!(
            parse_timestamp("2026-12-02T19:34:00.000000Z"),
            Some(epoch(1_796_240_040))
        );
        assert_eq!(
            parse_timestamp("2026-12-02T20:34:00+01:00"),
            Some(epoch(1_796_240_040))
        );
        assert_eq!(
            parse_timestamp("2000-02-29T12:00:00.5Z"),
            Some(SystemTime::UNIX_EPOCH + Duration::new(951_825_600, 500_000_000))
        );
        for bad in [
            "",
            "2026-12-02",
            "2026-13-02T00:00:00Z",
            "2026-12-02T25:00:00Z",
            "2026-12-02T00:00:00",
            "2026-12-02T00:00:00.x1Z",
            "soon",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_tokens_url_has_one_v3() {
        assert_eq!(
            tokens_url("http://k:5000/v3/"),
            "http://k:5000/v3/auth/tokens"
        );
        assert_eq!(tokens_url("http://k:5000"), "http://k:5000/v3/auth/tokens");
        assert_eq!(
            tokens_url("http://host/identity"),
            "http://host/identity/v3/auth/tokens"
        );
    }
}
