//! Slice type → Placement resource class: the reporter's rule (`agent::placement::classes`)
//! with no `default_type` and no `[placement.resource_classes]`, which is how the fleet
//! configures its hosts.

use agent::placement::classes::ClassMap;

/// The resource class vgpud reports `slice_type` under, without overrides or a default type.
pub fn class_of(slice_type: &str) -> String {
    ClassMap::default().class_of(slice_type)
}
