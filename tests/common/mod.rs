#![allow(dead_code)]
pub mod fixture;
pub mod peers;
pub mod proxy;
