//! Compiles the `.proto` files of the gRPC services slidegate serves (`proto/`) into the
//! descriptor set that gRPC reflection serves (`OUT_DIR/services.bin`). The message types
//! themselves come from the `envoy-types` crate; this only describes them to `grpcurl`.

use std::path::PathBuf;

fn main() {
    let services = [
        "envoy/service/auth/v3/external_auth.proto",
        "envoy/service/ratelimit/v3/rls.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let set = protox::compile(services, ["proto"]).expect("the service protos compile");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bytes = prost::Message::encode_to_vec(&set);
    std::fs::write(out.join("services.bin"), bytes).expect("OUT_DIR is writable");
}
