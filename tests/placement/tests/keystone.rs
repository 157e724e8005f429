//! Keystone's password flow against a real Keystone (PyPI `keystone`, bootstrapped with SQLite)
//! and a Placement that validates tokens with it (keystonemiddleware, no validation cache):
//! the token is issued, Placement's endpoint comes from the catalog, a revoked token is
//! replaced after Placement's 401, a token near expiry is replaced before it is sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use placement::{Auth, Client, ClientConfig, Error, KeystonePassword};
use testkit::keystone::{ADMIN_PASSWORD, KeystonePeer, REGION};
use testkit::placement::{MiddlewareAuth, PlacementPeer};

/// The service user vgpud authenticates as (admin in project `admin`).
const USER: &str = "vgpud";
const PASSWORD: &str = "vgpud-password";

fn password(keystone: &KeystonePeer, interface: &str, region: Option<&str>) -> KeystonePassword {
    KeystonePassword {
        auth_url: keystone.auth_url(),
        username: USER.into(),
        password: PASSWORD.into(),
        user_domain_name: "Default".into(),
        project_name: "admin".into(),
        project_domain_name: "Default".into(),
        region: region.map(str::to_owned),
        interface: interface.into(),
    }
}

fn client(creds: KeystonePassword, endpoint: Option<String>) -> Client {
    Client::new(ClientConfig {
        endpoint,
        auth: Auth::Keystone(creds),
        ca_file: None,
        timeout: Duration::from_secs(20),
    })
    .unwrap()
}

/// Keystone issuing tokens valid `expiration_s`, and a Placement in its catalog (internal
/// interface, RegionOne) that validates tokens with it.
fn cloud(expiration_s: u32) -> Option<(KeystonePeer, PlacementPeer)> {
    let keystone = KeystonePeer::start(expiration_s).unwrap()?;
    let placement = PlacementPeer::start_keystone(&MiddlewareAuth {
        auth_url: keystone.auth_url(),
        username: "admin".into(),
        password: ADMIN_PASSWORD.into(),
        project: "admin".into(),
    })
    .unwrap()?;
    keystone.create_admin_user(USER, PASSWORD).unwrap();
    keystone
        .register_placement(&placement.url(), &["internal"], REGION)
        .unwrap();
    Some((keystone, placement))
}

#[test]
fn the_password_flow_finds_placement_in_the_catalog_and_survives_a_revoked_token() {
    let Some((keystone, placement)) = cloud(3600) else {
        return;
    };
    let client = client(password(&keystone, "internal", Some(REGION)), None);
    assert_eq!(client.endpoint().unwrap(), placement.url());
    assert_eq!(issued(&keystone), 1);

    let root = client.create_provider("host1", None, None).unwrap();
    assert_eq!(client.provider_named("host1").unwrap(), Some(root.clone()));
    // The token is cached: no new one for these requests.
    assert_eq!(issued(&keystone), 1);

    // Revoked: Placement answers 401, the client gets a new token and the request goes through.
    keystone.revoke_tokens_of(USER).unwrap();
    assert_eq!(
        client.provider(root.uuid).unwrap(),
        Some(root),
        "{}",
        placement.log()
    );
    assert_eq!(issued(&keystone), 2);
    assert!(
        placement.log().contains("\" 401 "),
        "Placement never refused the revoked token:\n{}",
        placement.log()
    );
}

#[test]
fn a_token_is_renewed_before_it_expires() {
    // Valid 70 s: with renewal 60 s before expiry, it is due after 10 s.
    let Some((keystone, placement)) = cloud(70) else {
        return;
    };
    let client = client(password(&keystone, "internal", None), Some(placement.url()));
    client.create_provider("host1", None, None).unwrap();
    client.provider_named("host1").unwrap();
    assert_eq!(issued(&keystone), 1, "renewed too early");
    std::thread::sleep(Duration::from_secs(11));
    assert!(client.provider_named("host1").unwrap().is_some());
    assert_eq!(issued(&keystone), 2, "not renewed");
    assert!(
        !placement.log().contains("\" 401 "),
        "a token was sent after it was due:\n{}",
        placement.log()
    );
}

#[test]
fn keystone_refusals_and_a_catalog_without_placement_are_clear_errors() {
    let Some((keystone, placement)) = cloud(3600) else {
        return;
    };
    let mut wrong = password(&keystone, "internal", None);
    wrong.password = "wrong".into();
    let err = client(wrong, Some(placement.url()))
        .provider_named("host1")
        .unwrap_err();
    assert!(matches!(err, Error::Auth(_)), "{err:?}");

    // Only an internal endpoint is registered, in RegionOne.
    for (interface, region) in [("public", None), ("internal", Some("RegionTwo"))] {
        let err = client(password(&keystone, interface, region), None)
            .endpoint()
            .unwrap_err();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("catalog")),
            "{err:?}"
        );
    }

    // A fixed token Placement does not accept: a 401 is final (no Keystone to ask again).
    let fixed = Client::new(ClientConfig {
        endpoint: Some(placement.url()),
        auth: Auth::Token {
            token: "gAAAAABnot-a-token".into(),
        },
        ca_file: None,
        timeout: Duration::from_secs(20),
    })
    .unwrap();
    let err = fixed.provider_named("host1").unwrap_err();
    assert!(matches!(err, Error::Denied { status: 401, .. }), "{err:?}");
}

/// Tokens Keystone issued to the client under test (by its User-Agent).
fn issued(keystone: &KeystonePeer) -> usize {
    keystone.tokens_issued_to("vgpud-placement/")
}
