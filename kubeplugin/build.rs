//! Generates the kubelet API types and services from `proto/` (protoc from Debian's
//! protobuf-compiler; `PROTOC` may name another).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(
            &[
                "proto/deviceplugin_v1beta1.proto",
                "proto/podresources_v1.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
