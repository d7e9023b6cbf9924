"""The broker's remoting processors, as RocketMQ's ``broker.processor`` package: each turns a
remoting request into the member's message-service request and its answer into the remoting
response a 4.9.4 client reads."""
