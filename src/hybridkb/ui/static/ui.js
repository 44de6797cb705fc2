// hybridkb ui: the little the pages need beyond HTML (uploads, the graph). No library.
"use strict";

function csrf() { return document.body.dataset.csrf || ""; }

function say(box, text, kind) {
  const p = document.createElement("p");
  p.className = kind;
  p.textContent = text;
  box.appendChild(p);
}

async function uploadOne(form, file, box) {
  const url = "/upload?" + new URLSearchParams({
    c: form.dataset.collection, name: file.name, folder: form.elements.folder.value,
  });
  let answer;
  try {
    const response = await fetch(url, {
      method: "POST", body: file, credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf(), "Content-Type": "application/octet-stream" },
    });
    answer = await response.json();
  } catch (err) {
    say(box, file.name + ": the upload did not reach the server (" + err + ")", "error");
    return false;
  }
  if (answer.error) { say(box, answer.error, "error"); return false; }
  for (const line of answer.lines || []) say(box, line, answer.ok ? "notice" : "error");
  return !!answer.ok;
}

async function uploadAll(form, files) {
  const box = form.querySelector("[data-upload-result]");
  box.textContent = "";
  if (!files.length) { say(box, "Choose or drop at least one file.", "error"); return; }
  let added = 0;
  for (const file of files) {
    const progress = document.createElement("p");
    progress.className = "muted";
    progress.textContent = "Uploading " + file.name + "…";
    box.appendChild(progress);
    if (await uploadOne(form, file, box)) added += 1;
    progress.remove();
  }
  if (added) {
    const more = document.createElement("p");
    const a = document.createElement("a");
    a.href = location.pathname + "?" + new URLSearchParams({ c: form.dataset.collection });
    a.textContent = "Show the documents";
    more.appendChild(a);
    box.appendChild(more);
  }
}

function setUpUploads() {
  for (const form of document.querySelectorAll("[data-upload]")) {
    const input = form.querySelector("input[type=file]");
    const zone = form.querySelector("[data-drop]");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      uploadAll(form, Array.from(input.files));
    });
    zone.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("over"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("over");
      uploadAll(form, Array.from(event.dataTransfer.files));
    });
  }
}

function setUpPageImages() {
  for (const img of document.querySelectorAll("[data-page-image]")) {
    img.addEventListener("error", async () => {
      const caption = img.parentElement.querySelector("[data-page-error]");
      try {
        const response = await fetch(img.src, { credentials: "same-origin" });
        const text = await response.text();
        const doc = new DOMParser().parseFromString(text, "text/html");
        const alert = doc.querySelector("[role=alert]");
        caption.textContent = alert ? alert.textContent : "The page image could not be drawn.";
      } catch (err) {
        caption.textContent = "The page image could not be loaded.";
      }
      caption.className = "error";
      img.remove();
    });
  }
}

function focusWantedChunk() {
  const wanted = document.querySelector(".chunk.wanted");
  if (wanted) { wanted.scrollIntoView({ block: "center" }); wanted.focus({ preventScroll: true }); }
}

document.addEventListener("DOMContentLoaded", () => {
  setUpUploads();
  setUpPageImages();
  focusWantedChunk();
  if (document.getElementById("graph") && window.hybridkbGraph) window.hybridkbGraph();
});
