"""The bodies the remoting requests carry (RocketMQ keeps them in ``common``'s protocol
packages; 5.x moved them into ``remoting.protocol``, as here)."""
