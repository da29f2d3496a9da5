//! A `redis-server` for the tests of what the cluster keeps in Redis (the shared tier, the
//! session records): started on a free loopback port, stopped and started again at will, read
//! and written behind the code's back.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` on a free loopback port, without persistence; killed when dropped.
pub(crate) struct Redis {
    pub(crate) port: u16,
    child: Option<Child>,
}

impl Redis {
    pub(crate) async fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut redis = Redis { port, child: None };
        redis.run().await;
        redis
    }

    pub(crate) async fn run(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (installed by .ci/install-cluster.sh)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut connection) = self.client().get_multiplexed_async_connection().await
                && redis::cmd("PING").query_async::<String>(&mut connection).await.is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not answer in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(crate) fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/0", self.port)).unwrap()
    }

    pub(crate) async fn set(&self, key: &str, value: &str) {
        let mut connection = self.client().get_multiplexed_async_connection().await.unwrap();
        redis::cmd("SET").arg(key).arg(value).query_async::<()>(&mut connection).await.unwrap();
    }

    pub(crate) async fn keys(&self, pattern: &str) -> Vec<String> {
        let mut connection = self.client().get_multiplexed_async_connection().await.unwrap();
        let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut connection).await.unwrap();
        keys.sort();
        keys
    }

    pub(crate) async fn hset(&self, key: &str, field: &str, value: &[u8]) {
        let mut connection = self.client().get_multiplexed_async_connection().await.unwrap();
        redis::cmd("HSET").arg(key).arg(field).arg(value).query_async::<()>(&mut connection).await.unwrap();
    }

    pub(crate) async fn hget(&self, key: &str, field: &str) -> Vec<u8> {
        let mut connection = self.client().get_multiplexed_async_connection().await.unwrap();
        redis::cmd("HGET").arg(key).arg(field).query_async(&mut connection).await.unwrap()
    }

    pub(crate) async fn del(&self, key: &str) {
        let mut connection = self.client().get_multiplexed_async_connection().await.unwrap();
        redis::cmd("DEL").arg(key).query_async::<()>(&mut connection).await.unwrap();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
