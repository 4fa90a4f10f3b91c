//! Test guest: a plain WASI command (it exports `wasi:cli/run`), to prove the
//! host refuses components of the wrong world.

fn main() {
    println!("I am not a policy");
}
