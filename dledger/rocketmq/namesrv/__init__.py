"""RocketMQ's name server (``rocketmq-namesrv``): where brokers register and clients find the
brokers of a topic. See docs/remoting.md."""
