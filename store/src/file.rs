//! The on-disk form: a one-line JSON header, then the JSON body it describes.
//!
//! ```text
//! {"format":"vgpud-state","version":1,"length":1234,"sha256":"9f86d0…"}
//! { …body… }
//! ```
//!
//! The checksum covers the body's exact bytes, so a torn or edited file is caught before any of
//! it is believed; the header stays readable so an operator can see what the file is.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Schema, StoreError};

/// The first line of a state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The document's format name.
    pub format: String,
    /// Its schema version.
    pub version: u32,
    /// Length of the body in bytes.
    pub length: u64,
    /// Lower-case hex SHA-256 of the body.
    pub sha256: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Encodes a document: header line, then the pretty-printed body and a final newline.
pub fn encode<T: Serialize>(value: &T, schema: Schema) -> Result<Vec<u8>, StoreError> {
    let mut body = serde_json::to_vec_pretty(value).map_err(StoreError::Encode)?;
    body.push(b'\n');
    let header = Header {
        format: schema.name.to_owned(),
        version: schema.version,
        length: body.len() as u64,
        sha256: sha256_hex(&body),
    };
    let mut out = serde_json::to_vec(&header).map_err(StoreError::Encode)?;
    out.push(b'\n');
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes and checks a document read from `path`.
pub fn decode<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    schema: Schema,
) -> Result<T, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_owned(),
        reason,
    };
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("it has no header line".to_owned()))?;
    let (head, body) = (&bytes[..newline], &bytes[newline + 1..]);
    let header: Header = serde_json::from_slice(head)
        .map_err(|e| corrupt(format!("the header line does not parse: {e}")))?;
    if header.format != schema.name {
        return Err(StoreError::WrongFormat {
            path: path.to_owned(),
            found: header.format.chars().take(64).collect(),
            expected: schema.name,
        });
    }
    if header.version > schema.version {
        return Err(StoreError::NewerVersion {
            path: path.to_owned(),
            found: header.version,
            supported: schema.version,
        });
    }
    if header.length != body.len() as u64 {
        return Err(corrupt(format!(
            "the header announces {} bytes of body but {} follow (a torn write?)",
            header.length,
            body.len()
        )));
    }
    if sha256_hex(body) != header.sha256 {
        return Err(corrupt(
            "the body's SHA-256 does not match the header".to_owned(),
        ));
    }
    serde_json::from_slice(body).map_err(|e| corrupt(format!("the body does not parse: {e}")))
}
