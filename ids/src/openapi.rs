//! OpenAPI schemas of the identifiers (feature `openapi`): each is described as its JSON form
//! is written, a string in canonical form or a number.

use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, schema::Schema};

use crate::{
    IommuGroupId, MdevParentName, MdevTypeId, MdevUuid, MigProfileName, NumaNodeId, PciAddress,
    PciDeviceId, PciVendorId, VgpuTypeId,
};

fn text(pattern: Option<&str>, example: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(pattern)
        .examples([serde_json::Value::from(example)])
        .into()
}

fn whole(format: KnownFormat, minimum: u32, maximum: u64) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(format)))
        .minimum(Some(minimum))
        .maximum(Some(maximum))
        .into()
}

macro_rules! schema {
    ($ty:ty, $body:expr) => {
        impl utoipa::PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                $body
            }
        }
        impl utoipa::ToSchema for $ty {}
    };
}

schema!(
    PciAddress,
    text(
        Some(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$"),
        "0000:07:00.0"
    )
);
schema!(
    MdevUuid,
    text(
        Some(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
        "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    )
);
schema!(MdevTypeId, text(None, "nvidia-222"));
schema!(MdevParentName, text(None, "0000:07:00.0"));
schema!(MigProfileName, text(None, "3g.40gb"));
schema!(PciVendorId, text(Some(r"^[0-9a-f]{4}$"), "10de"));
schema!(PciDeviceId, text(Some(r"^[0-9a-f]{4}$"), "2335"));
schema!(
    NumaNodeId,
    whole(KnownFormat::Int32, 0, u64::from(u16::MAX))
);
schema!(
    IommuGroupId,
    whole(KnownFormat::Int32, 0, u64::from(u32::MAX))
);
schema!(
    VgpuTypeId,
    whole(KnownFormat::Int32, 1, u64::from(u32::MAX))
);
