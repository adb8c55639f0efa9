// Preloaded into third-party test servers (`node --require loopback.cjs ...`) that listen on
// every interface: a port-only listen() is bound to 127.0.0.1 instead, so nothing a test starts
// is reachable from outside the machine.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const portOnly = typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (portOnly && (args.length === 1 || typeof args[1] === "function")) {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
