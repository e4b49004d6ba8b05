//! kube-rs against a real `flotilla hub` process.

fn main() {}
