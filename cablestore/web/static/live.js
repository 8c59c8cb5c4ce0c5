// Live channel page: new posts of a served store, from /live/CHANNEL (server-sent events), put
// at the top of the list. Every value is set as text (textContent), never parsed as HTML.
(function () {
  "use strict";
  var list = document.getElementById("messages");
  if (!list || !list.dataset.live || !window.EventSource) {
    return;
  }
  function span(tag, cls, text) {
    var el = document.createElement(tag);
    el.className = cls;
    el.textContent = text;
    return el;
  }
  var source = new EventSource(list.dataset.live);
  source.onopen = function () {
    list.dataset.liveState = "open";
  };
  source.onmessage = function (event) {
    var post = JSON.parse(event.data);
    if (document.getElementById("p-" + post.hash)) {
      return;
    }
    var li = document.createElement("li");
    li.className = "post live" + (post.hidden ? " is-hidden" : "");
    li.id = "p-" + post.hash;
    var link = document.createElement("a");
    link.className = "time";
    link.href = "/post/" + encodeURIComponent(post.hash);
    link.appendChild(span("time", "", post.time));
    li.appendChild(link);
    var who = span("bdi", "who", post.who);
    who.title = post.key;
    li.appendChild(who);
    var text = span("bdi", "text", post.text);
    text.dir = "auto";
    if (post.hidden) {
      var details = document.createElement("details");
      details.className = "hidden";
      details.appendChild(span("summary", "", "hidden by a moderator"));
      details.appendChild(text);
      li.appendChild(details);
    } else {
      li.appendChild(text);
    }
    list.insertBefore(li, list.firstChild);
  };
})();
