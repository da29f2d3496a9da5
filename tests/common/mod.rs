#![allow(dead_code)]
pub mod exposition;
pub mod fixture;
pub mod peers;
pub mod proxy;
